"""The daemon's database, through the real daemon: deleting a session, owner-only files after a
turn, and refusing at start — promptly, untouched, naming the path — a database it cannot use."""

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    collect_until_turn_end,
    create_session,
    read_events,
    read_only_folder,
    start_daemon,
    start_turn,
)
from tether.clients.core.rpc import CallError, Client
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.schema import SCHEMA_VERSION
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode
from tether.protocol.events import ApprovalRequested
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    SESSION_ATTACH,
    SESSION_DELETE,
    SESSION_LIST,
    SESSION_READ,
    ApprovalRespondParams,
    SessionAttachParams,
    SessionDeletedParams,
    SessionDeleteParams,
    SessionRef,
)
from tether.testing import ModelServer

EXIT_DATA_UNUSABLE = 4


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def wait_deleted(client: Client, session_id: str) -> SessionDeletedParams:
    while True:
        method, params = client.next_notification(timeout=10)
        if method == "session/deleted":
            assert isinstance(params, SessionDeletedParams)
            assert params.session_id == session_id
            return params


def rows_of(database: Path, session_id: str) -> list[int]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        return [
            conn.execute(
                f"SELECT count(*) FROM {table} WHERE {column} = ?", (session_id,)
            ).fetchone()[0]
            for table, column in (
                ("sessions", "id"),
                ("events", "session_id"),
                ("snapshots", "session_id"),
            )
        ]


@pytest.mark.shared_daemon
def test_session_delete_refuses_a_running_turn_then_deletes_everything(
    daemon: DaemonProcess, model_server: ModelServer, home: Home, workspace: Path
) -> None:
    model_server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {"name": "write_file", "arguments": {"path": "new.txt", "content": "x\n"}}
                    ]
                },
                {"text": "written"},
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "arguments": {"command": "echo hi", "description": "test"},
                        }
                    ]
                },
                {"text": "done"},
            ]
        }
    )
    database = home.database_path(workspace)
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        keep_id = create_session(a)
        attach(a, session_id)
        start_turn(a, session_id, "write a file")
        collect_until_turn_end(a, session_id)
        start_turn(a, session_id, "run a command")
        events = read_events(
            a, session_id, lambda evs: bool(evs) and isinstance(evs[-1].event, ApprovalRequested)
        )
        event = events[-1].event
        assert isinstance(event, ApprovalRequested)
        attach(b, session_id, role="controller")
        with pytest.raises(CallError) as busy:
            b.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id))
        assert busy.value.code == ErrorCode.SESSION_BUSY
        a.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=session_id, approval_id=event.approval.id, decision="deny"
            ),
        )
        collect_until_turn_end(a, session_id)
        assert rows_of(database, session_id)[0] == 1
        assert all(count > 0 for count in rows_of(database, session_id))

        done = cli(home, "sessions", "--delete", session_id, "--workspace", str(workspace))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"deleted session {session_id}"

        assert wait_deleted(a, session_id).by == "tether-cli"
        assert wait_deleted(b, session_id).by == "tether-cli"
        listed = a.call(SESSION_LIST).sessions
        assert [s.id for s in listed] == [keep_id]
        gone_ref = SessionRef(session_id=session_id)
        for call in (
            lambda: a.call(SESSION_READ, gone_ref),
            lambda: a.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id)),
            lambda: a.call(SESSION_ATTACH, SessionAttachParams(session_id=session_id)),
        ):
            with pytest.raises(CallError) as gone:
                call()
            assert gone.value.code == ErrorCode.SESSION_NOT_FOUND
    assert rows_of(database, session_id) == [0, 0, 0]
    assert rows_of(database, keep_id)[0] == 1


@pytest.mark.shared_daemon
def test_the_daemons_files_and_folders_are_owner_only_after_a_turn(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "hello")
        collect_until_turn_end(client, session_id)
        database = home.database_path(workspace)
        files = [database.with_name(database.name + s) for s in ("", "-wal", "-shm")]
        logs = home.root / "state" / "tether" / "log"
        files += list(logs.glob("daemon-*.log"))
        assert len(files) == 4
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        folders = [
            home.root / "data" / "tether",
            home.root / "data" / "tether" / "workspaces",
            database.parent,
            home.root / "state" / "tether",
            logs,
        ]
        assert {str(f): mode(f) for f in folders} == {str(f): 0o700 for f in folders}


def spawn(home: Home, workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)],
        env=home.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def write_database(home: Home, workspace: Path) -> Path:
    """The workspace's database with 40 sessions, written by the store in this process (what
    is tested is the start that refuses it)."""
    path = home.database_path(workspace)
    path.parent.mkdir(mode=0o700, parents=True)
    store = Store(path)
    store.open()
    for n in range(40):
        store.create_session_nowait(SessionRow(f"s_{n}", "", 0.0, 0.0, 0, None))
    store.close()
    return path


def make_database(home: Home, workspace: Path) -> Path:
    """The workspace's database, made by a daemon: its folders' and files' modes too."""
    proc = start_daemon(home, workspace, "--idle-timeout", "0")
    with proc.client() as client:
        for _ in range(40):
            create_session(client)
    assert proc.stop() == 0
    return home.database_path(workspace)


@pytest.mark.parametrize("keep", [0, 4096], ids=["whole-file", "after-the-first-page"])
def test_a_damaged_database_stops_the_start_untouched_and_doctor_says_how_to_recover(
    home: Home, workspace: Path, keep: int
) -> None:
    database = write_database(home, workspace)
    data = database.read_bytes()
    damaged = data[:keep] + os.urandom(len(data) - keep)
    database.write_bytes(damaged)

    for _ in range(2):  # the lock is released: the second start fails the same way, not as busy
        done = spawn(home, workspace)
        assert done.returncode == EXIT_DATA_UNUSABLE, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"tether daemon: the session database {database} is damaged")
        assert "tether doctor" in line
    assert not home.discovery_path(workspace).exists()
    assert database.read_bytes() == damaged

    # The CLI starts the daemon itself and shows the daemon's own line.
    listed = cli(home, "sessions", "--workspace", str(workspace))
    assert listed.returncode == 2
    assert f"exited with code 4: the session database {database} is damaged" in listed.stderr

    doctor = cli(home, "doctor", "--workspace", str(workspace))
    assert doctor.returncode == 1
    assert f"database:  {database}" in doctor.stdout
    assert "integrity: DAMAGED" in doctor.stdout
    assert f"mv {database} {database}.damaged" in doctor.stdout
    assert database.read_bytes() == damaged


def test_doctor_reports_a_sound_database(home: Home, workspace: Path) -> None:
    make_database(home, workspace)
    doctor = cli(home, "doctor", "--workspace", str(workspace))
    assert doctor.returncode == 0, doctor.stdout
    assert "integrity: ok" in doctor.stdout
    assert f"schema:    version {SCHEMA_VERSION}" in doctor.stdout
    assert "permissions: owner-only" in doctor.stdout


def test_a_read_only_data_folder_is_named_at_start(home: Home, workspace: Path) -> None:
    data = home.root / "data" / "tether"
    data.mkdir(parents=True, mode=0o700)
    with read_only_folder(data):
        done = spawn(home, workspace)
    assert done.returncode == EXIT_DATA_UNUSABLE
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"tether daemon: cannot prepare {data / 'workspaces'}: ")
    assert "Permission denied" in line or "Operation not permitted" in line


@pytest.mark.parametrize("lock", ["first start", "lock left by an earlier daemon"])
def test_a_read_only_database_folder_is_named_at_start(
    home: Home, workspace: Path, lock: str
) -> None:
    database = write_database(home, workspace)
    before = database.read_bytes()
    if lock != "first start":
        home.lock_path(workspace).touch(mode=0o600)
    with read_only_folder(database.parent):
        done = spawn(home, workspace)
    assert done.returncode == EXIT_DATA_UNUSABLE
    (line,) = done.stderr.strip().splitlines()
    if lock == "first start":
        # The lock beside the database is the first thing the daemon makes there.
        assert line.startswith(f"tether daemon: cannot prepare {home.lock_path(workspace)}: ")
        assert "Permission denied" in line or "Operation not permitted" in line
    else:
        assert line.startswith(f"tether daemon: cannot write the session database {database}: ")
        assert f"{database.parent} is not writable" in line
    assert database.read_bytes() == before
