"""Commands the daemon runs, against the real daemon subprocess: a cancelled or stopped turn
closes the command's item, and a crashed daemon's process trees are stopped by the next one
(and only trees it owned), with the store intact and the session able to go on."""

import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import msgspec

from tests.support import (
    DaemonProcess,
    Home,
    alive,
    attach,
    collect_until_turn_end,
    completed_items,
    create_session,
    deltas_at_least,
    group_survivors,
    persisted_events,
    read_events,
    read_snapshot,
    start_daemon,
    tool_calls_answered,
    wait_until,
)
from tether.clients.core.rpc import Client
from tether.daemon.procs.ownership import GroupRecord, OwnedGroups, RecordLine, boot_id, start_time
from tether.protocol.discovery import workspace_key
from tether.protocol.events import AnyEvent, ItemCompleted, ItemDelta, ItemStarted, TurnCompleted
from tether.protocol.items import AgentMessage, ToolCall
from tether.protocol.methods import (
    TURN_CANCEL,
    TURN_START,
    SessionEventParams,
    TurnCancelParams,
    TurnStartParams,
)
from tether.testing import ModelServer

# A child and a grandchild that ignore SIGTERM, each writing its pid ($$ would be the main
# shell's), then sleeping; the shell itself ignores SIGTERM too and waits for them.
TREE = (
    "trap '' TERM; "
    "(trap '' TERM; (trap '' TERM; echo $BASHPID > grandchild.pid; exec sleep 300) & "
    "echo $BASHPID > child.pid; sleep 300) & "
    "echo started; wait"
)


def command_script(**arguments: object) -> dict[str, object]:
    call = {"name": "run_command", "arguments": {"description": "a tree", **arguments}}
    return {"steps": [{"tool_calls": [call]}, {"text": "Picking up again."}]}


def start_auto_turn(client: Client, session_id: str, text: str) -> str:
    params = TurnStartParams(session_id=session_id, text=text, permission_mode="auto")
    return client.call(TURN_START, params).turn_id


def tree_pids(workspace: Path) -> list[int]:
    """The child's and grandchild's pids, once both have written them."""
    files = [workspace / "child.pid", workspace / "grandchild.pid"]
    wait_until(lambda: all(f.exists() and f.read_text().strip() for f in files), "no pid files")
    return [int(f.read_text()) for f in files]


def pgid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


def assert_nothing_left_open(home: Home, workspace: Path, session_id: str) -> None:
    """Every item started in the session's persisted log is completed there. The store writes
    behind what clients are sent, so this waits (briefly) for the turn's end to be on disk."""

    def persisted() -> list[AnyEvent]:
        return [event for _, event in persisted_events(home, workspace, session_id)]

    wait_until(
        lambda: any(isinstance(e, TurnCompleted) for e in persisted()),
        "the turn's end in the store",
    )
    events = persisted()
    started = {e.item.id for e in events if isinstance(e, ItemStarted)}
    finished = {e.item.id for e in events if isinstance(e, ItemCompleted)}
    assert started == finished


def integrity(home: Home, workspace: Path) -> str:
    with closing(sqlite3.connect(home.database_path(workspace))) as db:
        (result,) = db.execute("PRAGMA integrity_check").fetchone()
    return str(result)


def prepare_tree(workspace: Path, model_server: ModelServer) -> None:
    """A script whose child and grandchild ignore SIGTERM, and a model that runs it."""
    (workspace / "tree.sh").write_text(TREE)
    model_server.set_script(command_script(command="bash tree.sh"))


def run_tree(client: Client) -> tuple[str, str]:
    """A new session, attached, whose turn runs the tree; returns (session, turn) once the
    tree has started."""
    session_id = create_session(client)
    attach(client, session_id)
    turn_id = start_auto_turn(client, session_id, "run the tree")
    read_events(
        client,
        session_id,
        lambda evs: any(isinstance(e.event, ItemDelta) and "started" in e.event.delta for e in evs),
    )
    return session_id, turn_id


def go_on_after_restart(
    home: Home, workspace: Path, model_server: ModelServer, session_id: str
) -> DaemonProcess:
    """Restart the daemon and run a `continue` turn; returns the running daemon."""
    assert integrity(home, workspace) == "ok"
    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    with restarted.client("b") as b:
        snapshot = read_snapshot(b, session_id)
        calls = [i for t in snapshot.turns for i in t.items if isinstance(i, ToolCall)]
        assert calls
        assert all(c.status != "running" for c in calls), calls
        model_server.set_script({"steps": [{"text": "Picking up again."}]})
        attach(b, session_id)
        start_auto_turn(b, session_id, "continue")
        events = collect_until_turn_end(b, session_id)
    end = events[-1].event
    assert isinstance(end, TurnCompleted)
    assert end.status == "completed"
    answers = [i.text for i in completed_items(events) if isinstance(i, AgentMessage)]
    assert answers == ["Picking up again."]
    tool_calls_answered(model_server.requests[-1]["messages"])
    return restarted


# --- cancel and SIGTERM close the command's item ----------------------------------------------


def test_cancel_mid_command_closes_the_call(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    prepare_tree(workspace, model_server)
    with daemon.client() as client:
        session_id, turn_id = run_tree(client)
        pids = tree_pids(workspace)
        client.call(TURN_CANCEL, TurnCancelParams(session_id=session_id, turn_id=turn_id))
        events = collect_until_turn_end(client, session_id)
        snapshot = read_snapshot(client, session_id)
    end = events[-1].event
    assert isinstance(end, TurnCompleted)
    assert end.status == "cancelled"
    (call,) = [i for i in completed_items(events) if isinstance(i, ToolCall)]
    assert call.status == "cancelled"
    (turn,) = snapshot.turns
    assert [(i.tool, i.status) for i in turn.items if isinstance(i, ToolCall)] == [
        ("run_command", "cancelled")
    ]
    assert_nothing_left_open(home, workspace, session_id)
    assert not any(alive(pid) for pid in pids)


def test_sigterm_mid_command_persists_a_closed_call_and_the_session_goes_on(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    prepare_tree(workspace, model_server)
    with daemon.client() as client:
        session_id, _ = run_tree(client)
        pids = tree_pids(workspace)
        assert daemon.stop_attached(client) == 0
    assert not any(alive(pid) for pid in pids)
    assert_nothing_left_open(home, workspace, session_id)
    events = [event for _, event in persisted_events(home, workspace, session_id)]
    assert [e.status for e in events if isinstance(e, TurnCompleted)] == ["interrupted"]
    restarted = go_on_after_restart(home, workspace, model_server, session_id)
    assert restarted.stop() == 0


# --- a crashed daemon's trees -----------------------------------------------------------------


def watchdog_of(daemon: DaemonProcess) -> int:
    """The pid of the daemon's watchdog (a child of the daemon's, running the module)."""

    def find() -> list[int]:
        found: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == daemon.proc.pid and b"tether.daemon.procs.watchdog" in cmdline:
                found.append(int(entry.name))
        return found

    wait_until(lambda: len(find()) == 1, "no watchdog")
    return find()[0]


def test_sigkill_mid_command_the_whole_tree_dies_with_the_daemon(
    daemon: DaemonProcess, workspace: Path, model_server: ModelServer
) -> None:
    prepare_tree(workspace, model_server)
    with daemon.client() as client:
        run_tree(client)
        pids = tree_pids(workspace)
        pgid = pgid_of(pids[0])
        daemon.kill()
    # Not only the shell: its child and grandchild, which ignore SIGTERM, go too.
    wait_until(lambda: not group_survivors(pgid), "the tree outlived the daemon")
    assert not any(alive(pid) for pid in pids)


def test_sigkill_mid_command_the_next_daemon_stops_the_whole_tree(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    prepare_tree(workspace, model_server)
    with daemon.client() as client:
        session_id, _ = run_tree(client)
        pids = tree_pids(workspace)
        pgid = pgid_of(pids[0])
        # The watchdog goes with the daemon (frozen first, so that it cannot act).
        watchdog = watchdog_of(daemon)
        os.kill(watchdog, signal.SIGSTOP)
        daemon.kill()
        os.kill(watchdog, signal.SIGKILL)
    # The child and grandchild ignore SIGTERM and live on (the shell too, unless it had
    # a death signal of its own).
    assert all(alive(pid) for pid in pids)
    restarted = go_on_after_restart(home, workspace, model_server, session_id)
    try:
        wait_until(lambda: not group_survivors(pgid), "the tree survived the restart")
        assert not any(alive(pid) for pid in pids)
    finally:
        assert restarted.stop() == 0


def test_sigkill_with_a_background_process_the_next_daemon_stops_it(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    (workspace / "tree.sh").write_text(TREE)
    model_server.set_script(command_script(command="bash tree.sh", background=True))
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_auto_turn(client, session_id, "start the tree")
        collect_until_turn_end(client, session_id)
        pids = tree_pids(workspace)
        pgid = pgid_of(pids[0])
        watchdog = watchdog_of(daemon)
        os.kill(watchdog, signal.SIGSTOP)
        daemon.kill()
        os.kill(watchdog, signal.SIGKILL)
    assert all(alive(pid) for pid in pids)
    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        wait_until(lambda: not group_survivors(pgid), "the tree survived the restart")
        assert not any(alive(pid) for pid in pids)
    finally:
        assert restarted.stop() == 0


def test_sigkill_mid_stream_leaves_a_sound_store_and_the_session_goes_on(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    slow = {"text": "".join(f"<{i:04d}>" for i in range(200)), "chunks": 200}
    model_server.set_script({"steps": [{**slow, "hold_at_chunks": [10]}]})  # killed while held
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_auto_turn(client, session_id, "write a lot")
        read_events(client, session_id, deltas_at_least(10))
        daemon.kill()
    assert integrity(home, workspace) == "ok"
    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        model_server.set_script({"steps": [{"text": "Picking up again."}]})
        with restarted.client("b") as b:
            attach(b, session_id)
            start_auto_turn(b, session_id, "continue")
            events: list[SessionEventParams] = collect_until_turn_end(b, session_id)
        end = events[-1].event
        assert isinstance(end, TurnCompleted)
        assert end.status == "completed"
        users = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] == "user"]
        assert users == ["write a lot", "continue"]
    finally:
        assert restarted.stop() == 0
    assert integrity(home, workspace) == "ok"


def record_path(home: Home, workspace: Path) -> Path:
    key = workspace_key(str(workspace.resolve()))
    return home.root / "state" / "tether" / "workspaces" / key / "processes.json"


def test_only_groups_the_record_proves_are_ours_are_stopped(home: Home, workspace: Path) -> None:
    """A record naming a group whose leader started at another time (its pid was reused) must
    not cost that group its life; one whose leader matches is stopped."""
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    ours = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        wait_until(lambda: start_time(ours.pid) > 0 and start_time(stranger.pid) > 0, "no stat")
        records = [
            GroupRecord(pgid=stranger.pid, start=start_time(stranger.pid) - 1, tag="0" * 24),
            GroupRecord(pgid=ours.pid, start=start_time(ours.pid), tag="1" * 24),
        ]
        path = record_path(home, workspace)
        path.parent.mkdir(parents=True)
        lines = [RecordLine(add=record, boot_id=boot_id()) for record in records]
        path.write_bytes(b"".join(msgspec.json.encode(line) + b"\n" for line in lines))
        daemon = start_daemon(home, workspace, "--idle-timeout", "0")
        try:
            ours.wait(timeout=10)
            assert ours.returncode == -signal.SIGTERM
            assert alive(stranger.pid)
            wait_until(lambda: not OwnedGroups(path).read(), "the record kept them")
        finally:
            assert daemon.stop() == 0
        assert alive(stranger.pid)
        assert os.stat(path).st_mode & 0o777 == 0o600
    finally:
        for proc in (stranger, ours):
            proc.kill()
            proc.wait()
