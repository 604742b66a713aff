"""One workspace, one daemon, whatever the environment of the shell a command runs in. The
runtime dir (where discovery files are) follows `XDG_RUNTIME_DIR` and what exists under
/run/user, which differ between a desktop session, `sudo -E`, `env -u`, cron and an editor; the
lock that makes a daemon the workspace's one lives beside its database, which they share. So a
client whose runtime dir is not the daemon's finds the running daemon through the lock, a
second daemon for the same data refuses to start, and a runtime dir that vanishes under the
daemon is neither re-created nor a reason for a second daemon."""

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import msgspec

from tests.support import (
    STUCK_HOLDER,
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    create_session,
    deltas_at_least,
    read_events,
    run_installed,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.protocol.discovery import LockRecord, workspace_key
from tether.protocol.events import TurnCompleted
from tether.testing import ModelServer

HELD = {"steps": [{"text": "x" * 40, "chunks": 40, "hold_at_chunks": [5]}]}
"""A turn that streams five deltas, then waits for `release()`: running while others look."""


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


def isolated(home: Home, tmp_path: Path) -> None:
    """Keep the fallback runtime dir (`$TMPDIR/runtime-UID`) in the test's folder."""
    home.env["TMPDIR"] = str(private(tmp_path / "tmp"))


def holders(path: Path) -> set[int]:
    """The processes that have `path` open: one daemon per database."""
    found: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with suppress(OSError):
                    if os.readlink(fd) == str(path):
                        found.add(int(proc.name))
    return found


def lock_record(home: Home, workspace: Path) -> LockRecord:
    return msgspec.json.decode(home.lock_path(workspace).read_bytes(), type=LockRecord)


def stop_strays(database: Path, daemon: DaemonProcess) -> set[int]:
    """SIGTERM every other process holding the database (a second daemon), and name them."""
    strays = holders(database) - {daemon.proc.pid}
    for pid in strays:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return strays


def test_shells_with_other_runtime_dirs_find_the_running_daemon_and_leave_its_turn_alone(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    isolated(home, tmp_path)
    model_server.set_script(HELD)
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    database = home.database_path(workspace)
    strays: set[int] = set()
    try:
        with daemon.client("first") as client:
            session_id = create_session(client)
            attach(client, session_id)
            start_turn(client, session_id, "go")
            read_events(client, session_id, deltas_at_least(5))

            unset = {k: v for k, v in home.env.items() if k != "XDG_RUNTIME_DIR"}
            other = {**home.env, "XDG_RUNTIME_DIR": str(private(tmp_path / "other-run"))}
            for env in (unset, other):
                listed = run_installed(env, "sessions", "--json", "-w", str(workspace))
                assert listed.returncode == 0, listed.stderr
                assert session_id in listed.stdout
            # The TypeScript library's way: the locate helper, in the other environment.
            located = subprocess.run(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "tether.clients.locate",
                    "--workspace",
                    str(workspace),
                ],
                env=other,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert located.returncode == 0, located.stderr
            answer = json.loads(located.stdout)
            assert answer["discovery"]["pid"] == daemon.proc.pid
            assert answer["started"] is False
            assert answer["discoveryFile"] == str(home.discovery_path(workspace))

            assert holders(database) == {daemon.proc.pid}
            model_server.release()
            last = collect_until_turn_end(client, session_id)[-1].event
        assert isinstance(last, TurnCompleted)
        assert last.status == "completed"
    finally:
        strays = stop_strays(database, daemon)
        daemon.stop()
    assert strays == set(), "a second daemon opened the workspace's database"
    errors = [r for r in home.log_records(workspace) if r.get("level") == "error"]
    assert errors == []


def test_a_second_daemon_for_the_same_data_refuses_and_names_the_first(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    isolated(home, tmp_path)
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    database = home.database_path(workspace)
    other = {**home.env, "XDG_RUNTIME_DIR": str(private(tmp_path / "other-run"))}
    try:
        second = subprocess.run(
            [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)],
            env=other,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        strays = stop_strays(database, daemon)
        daemon.stop()
    assert strays == set(), "a second daemon opened the workspace's database"
    assert second.returncode == 3, second.stderr
    assert second.stderr.strip() == (
        f"tether daemon: another daemon (pid {daemon.proc.pid}) already serves"
        f" {workspace.resolve()}; its discovery file is {home.discovery_path(workspace)}"
    )


def test_a_runtime_dir_removed_under_the_daemon_is_not_recreated_and_it_is_still_found(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    # As /run/user/UID is removed when the user's last session ends.
    isolated(home, tmp_path)
    user_runtime = private(tmp_path / "run" / "user" / "1000")
    (tmp_path / "run" / "user").chmod(0o755)
    home.env["XDG_RUNTIME_DIR"] = str(user_runtime)
    home.runtime = user_runtime
    daemon = start_daemon(
        home, workspace, "--idle-timeout", "0", "--discovery-check-interval", "0.05"
    )
    database = home.database_path(workspace)
    try:
        subprocess.run(["rm", "-rf", str(user_runtime)], check=True)
        name = home.discovery_path(workspace).name
        fallback = tmp_path / "tmp" / f"runtime-{os.geteuid()}" / "tether" / name
        wait_until(
            lambda: fallback.exists() or (user_runtime / "tether" / name).exists(),
            "the discovery file put back",
        )
        assert not user_runtime.exists(), "the daemon re-created the runtime dir"
        assert json.loads(fallback.read_text())["pid"] == daemon.proc.pid
        wait_until(
            lambda: lock_record(home, workspace).discovery == str(fallback),
            "the lock's record naming the file's new place",
        )
        # A client still given the vanished folder, and one without any.
        unset = {k: v for k, v in home.env.items() if k != "XDG_RUNTIME_DIR"}
        for env in (home.env, unset):
            status = run_installed(env, "daemon", "status", "-w", str(workspace))
            assert status.returncode == 0, status.stderr
            assert str(daemon.proc.pid) in status.stdout
    finally:
        strays = stop_strays(database, daemon)
        daemon.stop()
    assert strays == set(), "a second daemon opened the workspace's database"
    assert not user_runtime.exists()


def test_a_daemon_of_an_earlier_tether_is_neither_joined_nor_ignored(
    home: Home, workspace: Path
) -> None:
    # After an upgrade the running daemon still holds the lock where tether used to keep it:
    # a new daemon must not open the database beside it, and clients see that one.
    key = workspace_key(str(workspace.resolve()))
    former = home.runtime / "tether" / f"daemon-{key}.lock"
    former.parent.mkdir(mode=0o700)
    holder = subprocess.Popen(
        [sys.executable, "-P", "-c", STUCK_HOLDER, str(former)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
        second = subprocess.run(
            [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)],
            env=home.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 3, second.stderr
        assert f"another daemon (pid {holder.pid}) already serves" in second.stderr
        assert not home.database_path(workspace).exists()
        listed = run_installed(home.env, "sessions", "-w", str(workspace))
        assert listed.returncode == 2, listed.stderr
        assert f"(pid {holder.pid}) has been starting for" in listed.stderr
    finally:
        holder.kill()
        holder.communicate(timeout=10)
