"""The tools as the daemon runs them: undo that survives a restart, command trees that die
with a cancelled turn, background processes the daemon owns, the todo list as session state,
and edit approvals with a diff preview."""

import os
import signal
from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    alive,
    attach,
    cli,
    collect_until_turn_end,
    completed_items,
    create_session,
    read_events,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.protocol.events import ApprovalRequested, ItemDelta, TodosUpdated, TurnCompleted
from tether.protocol.items import ToolCall, TurnSummary
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    PROCESS_KILL,
    PROCESS_LIST,
    SESSION_UNDO,
    TURN_CANCEL,
    TURN_START,
    ApprovalRespondParams,
    ProcessKillParams,
    SessionUndoParams,
    TurnCancelParams,
)
from tether.testing import ModelServer


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


def steps(*calls: dict[str, object], final: str = "done") -> dict[str, object]:
    return {"steps": [*({"tool_calls": [c]} for c in calls), {"text": final}]}


def test_edits_are_summarised_and_undone_after_a_restart(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    app = workspace / "src" / "app.py"
    original = app.read_text()
    model_server.set_script(
        steps(
            call("read_file", path="src/app.py"),
            call("edit_file", path="src/app.py", old_string="hello", new_string="hi there"),
            call("write_file", path="src/new_module.py", content="VALUE = 1\nOTHER = 2\n"),
        )
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            turn_id = start_turn(client, session_id, "edit")
            events = collect_until_turn_end(client, session_id)
    finally:
        assert daemon.stop() == 0
    assert "hi there" in app.read_text()
    summary = completed_items(events)[-1]
    assert isinstance(summary, TurnSummary)
    changed = {(f.path, f.added, f.removed, f.created) for f in summary.files_changed}
    assert changed == {("src/app.py", 1, 1, False), ("src/new_module.py", 2, 0, True)}

    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with restarted.client() as client:
            result = client.call(
                SESSION_UNDO,
                SessionUndoParams(session_id=session_id),
            )
    finally:
        restarted.stop()
    assert result.applied
    assert result.turn_id == turn_id
    assert result.restored == ["src/app.py"]
    assert result.removed == ["src/new_module.py"]
    assert "command" in result.note
    assert app.read_text() == original
    assert not (workspace / "src" / "new_module.py").exists()


@pytest.mark.shared_daemon
def test_undo_leaves_files_changed_since_alone_unless_forced(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(steps(call("write_file", path="notes.txt", content="agent\n")))
    ran = cli(home, "run", "-w", str(workspace), "write notes")
    assert ran.returncode == 0, ran.stderr
    (workspace / "notes.txt").write_text("the user's own edit\n")
    refused = cli(home, "undo", "-w", str(workspace))
    assert refused.returncode == 1
    assert "notes.txt" in refused.stderr
    assert (workspace / "notes.txt").read_text() == "the user's own edit\n"
    forced = cli(home, "undo", "-w", str(workspace), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "removed  notes.txt" in forced.stdout
    assert not (workspace / "notes.txt").exists()


@pytest.mark.shared_daemon
def test_cancel_kills_the_whole_command_tree(
    daemon: DaemonProcess, workspace: Path, model_server: ModelServer
) -> None:
    # A child and a grandchild that ignore SIGTERM, each writing its own pid ($BASHPID: in a
    # subshell $$ is the main shell's), then sleeping.
    script = (
        "trap '' TERM; "
        "(trap '' TERM; (trap '' TERM; echo $BASHPID > grandchild.pid; exec sleep 300) & "
        "echo $BASHPID > child.pid; sleep 300) & "
        "echo started; wait"
    )
    (workspace / "tree.sh").write_text(script)
    model_server.set_script(
        steps(call("run_command", command="bash tree.sh", description="start a tree"))
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        turn_id = start_turn(client, session_id, "run the tree")
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=session_id,
                approval_id=_approval_id(client, session_id),
                decision="allow",
            ),
        )
        read_events(
            client,
            session_id,
            lambda evs: any(
                isinstance(e.event, ItemDelta) and "started" in e.event.delta for e in evs
            ),
        )
        wait_until((workspace / "grandchild.pid").exists, "the grandchild's pid written")
        pids = [int((workspace / f"{n}.pid").read_text()) for n in ("child", "grandchild")]
        assert all(alive(pid) for pid in pids)
        client.call(TURN_CANCEL, TurnCancelParams(session_id=session_id, turn_id=turn_id))
        events = collect_until_turn_end(client, session_id)
    assert isinstance(events[-1].event, TurnCompleted)
    assert events[-1].event.status == "cancelled"
    wait_until(lambda: not any(alive(pid) for pid in pids), "the cancelled tree gone")


def _approval_id(client: object, session_id: str) -> str:
    from tests.support import read_events as _read

    events = _read(
        client,  # type: ignore[arg-type]
        session_id,
        lambda evs: any(isinstance(e.event, ApprovalRequested) for e in evs),
    )
    (request,) = [e.event for e in events if isinstance(e.event, ApprovalRequested)]
    return request.approval.id


def test_background_processes_are_owned_by_the_daemon(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        steps(
            call(
                "run_command",
                command="echo serving; echo $$ > server.pid; exec sleep 300",
                description="start a server",
                background=True,
            ),
            final="started",
        )
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "--permission-mode", "auto", "serve")
        assert ran.returncode == 0, ran.stderr
        with daemon.client() as client:
            listed = client.call(PROCESS_LIST).processes
            assert [(p.status, p.command.startswith("echo serving")) for p in listed] == [
                ("running", True)
            ]
            wait_until((workspace / "server.pid").exists, "the server's pid written")
            pid = int((workspace / "server.pid").read_text())
            assert alive(pid)
            shown = cli(home, "processes", "-w", str(workspace))
            assert listed[0].id in shown.stdout
            output = cli(home, "processes", "--output", listed[0].id, "-w", str(workspace))
            assert output.returncode == 0, output.stderr
            assert output.stdout.splitlines()[1:] == ["serving"]
            unknown = cli(home, "processes", "--output", "p_none", "-w", str(workspace))
            assert unknown.returncode == 2
            assert "no background process 'p_none'" in unknown.stderr
            client.call(PROCESS_KILL, ProcessKillParams(process_id=listed[0].id))
            wait_until(lambda: not alive(pid), "the killed server gone")
        # A second one ends with the daemon.
        model_server.set_script(
            steps(
                call(
                    "run_command",
                    command="echo $$ > second.pid; exec sleep 300",
                    description="another",
                    background=True,
                ),
                final="ok",
            )
        )
        ran = cli(home, "run", "-w", str(workspace), "--permission-mode", "auto", "again")
        assert ran.returncode == 0, ran.stderr
        wait_until((workspace / "second.pid").exists, "the second pid written")
        second = int((workspace / "second.pid").read_text())
        assert alive(second)
    finally:
        daemon.stop(signal.SIGTERM)
    wait_until(lambda: not alive(second), "the background process ended with the daemon")


@pytest.mark.shared_daemon
def test_todo_list_is_session_state(daemon: DaemonProcess, model_server: ModelServer) -> None:
    todos = [
        {"content": "read the code", "status": "completed"},
        {"content": "write the fix", "status": "in_progress"},
    ]
    script = steps(call("todo_write", todos=todos), final="working on it")
    script["steps"].append({"text": "left for later, on purpose"})  # type: ignore[union-attr]
    model_server.set_script(script)
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attach(a, session_id)
        attach(b, session_id)
        start_turn(a, session_id, "plan")
        events_b = collect_until_turn_end(b, session_id)
        collect_until_turn_end(a, session_id)
    updates = [e.event for e in events_b if isinstance(e.event, TodosUpdated)]
    assert [[(t.content, t.status) for t in u.todos] for u in updates] == [
        [("read the code", "completed"), ("write the fix", "in_progress")]
    ]
    # The open item earned one reminder before the turn could end.
    assert len(model_server.requests) == 3
    assert "- write the fix" in model_server.requests[2]["messages"][-1]["content"]
    with daemon.client("late") as late:
        snapshot = attach(late, session_id).snapshot
    assert snapshot is not None
    assert [t.content for t in snapshot.todos] == ["read the code", "write the fix"]


@pytest.mark.shared_daemon
def test_edit_approval_carries_a_diff_preview(
    daemon: DaemonProcess, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        steps(
            call("read_file", path="README.md"),
            call("edit_file", path="README.md", old_string="It greets.", new_string="It waves."),
        )
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        from tether.protocol.methods import TurnStartParams

        client.call(
            TURN_START,
            TurnStartParams(session_id=session_id, text="edit", permission_mode="ask"),
        )
        events = read_events(
            client, session_id, lambda evs: any(isinstance(e.event, ApprovalRequested) for e in evs)
        )
        (request,) = [e.event.approval for e in events if isinstance(e.event, ApprovalRequested)]
        assert (request.kind, request.path) == ("edit", "README.md")
        assert "-It greets." in request.preview
        assert "+It waves." in request.preview
        assert (workspace / "README.md").read_text() == "# Demo project\nIt greets.\n"
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(session_id=session_id, approval_id=request.id, decision="allow"),
        )
        done = collect_until_turn_end(client, session_id)
    edits = [i for i in completed_items(done) if isinstance(i, ToolCall) and i.tool == "edit_file"]
    assert edits
    assert (workspace / "README.md").read_text() == "# Demo project\nIt waves.\n"
    assert os.path.exists(workspace / "README.md")
