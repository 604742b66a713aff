"""The SQLite store, in-process on real files: a failed operation costs only itself and never
leaves a caller waiting; the schema version; owner-only files; damaged and newer databases are
refused untouched."""

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from tests.support import read_only_folder
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.schema import SCHEMA_VERSION, StoreError, StoreOpenError
from tether.daemon.sessions.store import Store, StoreClosed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "data" / "tether.sqlite3")
    store.open()
    yield store
    store.close()


def row(session_id: str) -> SessionRow:
    return SessionRow(session_id, "", 1.0, 1.0, 0, None)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class Failures(list[str]):
    """Records what the store reports through `on_write_error`."""

    def __call__(self, what: str, exc: BaseException) -> None:
        self.append(f"{what}: {exc}")


class Held:
    """Keeps the store thread busy inside one call, so that what is queued meanwhile is
    written as one batch when it lets go."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.entered = threading.Event()
        self.release = threading.Event()

    def _hold(self, conn: sqlite3.Connection) -> None:
        self.entered.set()
        self.release.wait(10)

    async def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.store.call, self._hold)
        await trio.to_thread.run_sync(self.entered.wait, 10)


async def test_a_failed_write_is_rolled_back_alone_and_reported(store: Store) -> None:
    failures = Failures()
    store.on_write_error = failures
    store.create_session_nowait(row("s_a"))
    await store.flush()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            held = Held(store)
            await held.start(nursery)
            store.create_session_nowait(row("s_b"))
            store.create_session_nowait(row("s_a"))  # the same id again: a constraint fails
            store.append_event_nowait("s_b", 1, b"{}")
            held.release.set()
        await store.flush()
        assert sorted(r.id for r in await store.list_sessions()) == ["s_a", "s_b"]
        assert await store.load_events("s_b") == [(1, b"{}")]
    assert len(failures) == 1
    assert failures[0].startswith("creating session s_a: UNIQUE constraint failed")
    assert store.statistics().failed_writes == 1


async def test_the_writes_of_one_pass_reach_the_store_thread_together(store: Store) -> None:
    statements: list[str] = []
    began = threading.Event()

    def trace(statement: str) -> None:
        statements.append(statement)
        if statement == "BEGIN":
            began.set()

    await store.call(lambda conn: conn.set_trace_callback(trace))
    began.clear()
    store.create_session_nowait(row("s_a"))
    # The trio thread blocks here, in the same pass: a store thread woken by the first write
    # would start a transaction for it alone meanwhile (the wait ends as soon as it does).
    assert not began.wait(0.1)
    for seq in range(1, 6):
        store.append_event_nowait("s_a", seq, b"{}")
    assert await store.load_events("s_a") == [(seq, b"{}") for seq in range(1, 6)]
    await store.call(lambda conn: conn.set_trace_callback(None))
    transactions = "\n".join(statements).split("COMMIT")
    assert sum("INSERT" in transaction for transaction in transactions) == 1


async def test_a_read_sees_the_writes_queued_before_it_in_the_same_pass(store: Store) -> None:
    store.create_session_nowait(row("s_a"))
    store.append_event_nowait("s_a", 1, b"{}")
    assert await store.load_events("s_a") == [(1, b"{}")]


def test_closing_writes_what_was_queued_in_the_last_pass(tmp_path: Path) -> None:
    path = tmp_path / "tether.sqlite3"

    async def queue_and_close() -> None:
        store = Store(path)
        store.open()
        store.create_session_nowait(row("s_a"))
        store.close()  # before the pass that would have handed the write over

    trio.run(queue_and_close)
    store = Store(path)
    store.open()
    try:
        assert [r.id for r in trio.run(store.list_sessions)] == ["s_a"]
    finally:
        store.close()


async def test_a_failed_read_raises_in_the_callers_task_and_the_store_goes_on(
    store: Store,
) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            held = Held(store)
            await held.start(nursery)
            store.create_session_nowait(row("s_a"))
            outcome: list[BaseException] = []

            async def bad_read() -> None:
                try:
                    await store.call(lambda c: c.execute("SELECT * FROM no_such_table"))
                except StoreError as exc:
                    outcome.append(exc)

            nursery.start_soon(bad_read)
            await trio.testing.wait_all_tasks_blocked()
            store.append_event_nowait("s_a", 1, b"{}")
            held.release.set()
        (error,) = outcome
        assert "no such table" in str(error)
        assert str(store.path) in str(error)
        assert [r.id for r in await store.list_sessions()] == ["s_a"]
        assert await store.load_events("s_a") == [(1, b"{}")]


async def test_a_full_disk_loses_only_the_write_that_did_not_fit(store: Store) -> None:
    failures = Failures()
    store.on_write_error = failures
    store.create_session_nowait(row("s_a"))
    await store.flush()
    with trio.fail_after(10):
        pages = await store.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await store.call(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))
        async with trio.open_nursery() as nursery:
            held = Held(store)
            await held.start(nursery)
            store.append_event_nowait("s_a", 1, b"small")
            store.append_event_nowait("s_a", 2, b"x" * 200_000)  # does not fit: SQLITE_FULL
            store.append_event_nowait("s_a", 3, b"small too")
            held.release.set()
        assert await store.load_events("s_a") == [(1, b"small"), (3, b"small too")]
    assert failures == ["saving event 2 of session s_a: database or disk is full"]


async def test_a_read_only_database_fails_every_write_and_still_answers_reads(
    store: Store,
) -> None:
    failures = Failures()
    store.on_write_error = failures
    store.create_session_nowait(row("s_a"))
    with trio.fail_after(10):
        await store.call(lambda c: c.execute("PRAGMA query_only = ON"))
        store.create_session_nowait(row("s_b"))
        store.append_event_nowait("s_a", 1, b"{}")
        with pytest.raises(StoreError, match="readonly"):
            await store.delete_session("s_a")
        assert [r.id for r in await store.list_sessions()] == ["s_a"]
        assert await store.load_events("s_a") == []
        await store.call(lambda c: c.execute("PRAGMA query_only = OFF"))
        store.create_session_nowait(row("s_b"))
        await store.flush()
        assert sorted(r.id for r in await store.list_sessions()) == ["s_a", "s_b"]
    assert [f.split(":")[0] for f in failures] == [
        "creating session s_b",
        "saving event 1 of session s_a",
    ]
    assert all("readonly" in f for f in failures)


async def test_a_dead_store_thread_fails_every_call_instead_of_hanging(store: Store) -> None:
    def die(conn: sqlite3.Connection) -> None:
        raise SystemExit("the store thread stops")

    with trio.fail_after(10):
        with pytest.raises(StoreClosed):
            await store.call(die)
        with pytest.raises(StoreClosed):
            await store.list_sessions()
    with pytest.raises(StoreClosed):
        store.create_session_nowait(row("s_a"))


def test_a_new_database_has_the_current_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite3"
    store = Store(path)
    store.open()
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4


def unversioned_database(path: Path) -> None:
    """A database as tether wrote it before the schema had a version, with one session."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL, updated_at REAL NOT NULL,
            turn_count INTEGER NOT NULL DEFAULT 0, running_turn TEXT);
        CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
            body BLOB NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
        INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s_old', 'kept', 1, 2);
        INSERT INTO events VALUES ('s_old', 1, x'7b7d');
        """
    )
    conn.commit()
    conn.close()


async def test_an_unversioned_database_is_adopted_and_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    unversioned_database(path)
    store = Store(path)
    store.open()
    try:
        with trio.fail_after(10):
            (old,) = await store.list_sessions()
            assert (old.id, old.title) == ("s_old", "kept")
            assert await store.load_events("s_old") == [(1, b"{}")]
            assert await store.last_snapshot_turn("s_old") is None  # the table was added
            version = await store.call(lambda c: c.execute("PRAGMA user_version").fetchone())
            assert version[0] == SCHEMA_VERSION
            assert (old.last_status, old.model, old.permission_mode) == (None, "", None)
    finally:
        store.close()


async def test_a_version_1_database_gets_each_session_s_last_status_model_and_mode(
    tmp_path: Path,
) -> None:
    """Migrating to 2 fills the session list's columns from the events already stored."""
    path = tmp_path / "v1.sqlite3"
    unversioned_database(path)

    def event(seq: int, body: object) -> tuple[str, int, bytes]:
        return ("s_old", seq, msgspec.json.encode(body))

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 1")
        conn.execute("DELETE FROM events")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?)",
            [
                event(1, {"type": "session_configured", "model": "first", "permissionMode": "ask"}),
                event(2, {"type": "turn_completed", "turnId": "t_1", "status": "completed"}),
                event(3, {"type": "session_configured", "model": "second"}),
                event(4, {"type": "turn_completed", "turnId": "t_2", "status": "failed"}),
            ],
        )
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s_new', '', 3, 4)"
        )
    store = Store(path)
    store.open()
    try:
        with trio.fail_after(10):
            rows = {r.id: r for r in await store.list_sessions()}
        old, new = rows["s_old"], rows["s_new"]
        assert (old.last_status, old.model, old.permission_mode) == ("failed", "second", "ask")
        assert (new.last_status, new.model, new.permission_mode) == (None, "", None)
    finally:
        store.close()


def test_a_database_from_a_newer_tether_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite3"
    unversioned_database(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 7")
    before = path.read_bytes()
    with pytest.raises(StoreOpenError) as caught:
        Store(path).open()
    assert caught.value.reason == "newer"
    assert str(path) in str(caught.value)
    assert "schema version 7" in str(caught.value)
    assert path.read_bytes() == before


def test_the_database_and_its_folder_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "ws" / "tether.sqlite3"
    store = Store(path)
    store.open()
    try:
        store.create_session_nowait(row("s_a"))
        trio.run(store.flush)
        wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
        assert wal.exists()
        assert shm.exists()
        assert [mode(p) for p in (path, wal, shm)] == [0o600, 0o600, 0o600]
        assert mode(path.parent) == mode(path.parent.parent) == 0o700
    finally:
        store.close()


def test_wider_modes_left_by_an_older_tether_are_tightened(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path = folder / "tether.sqlite3"
    unversioned_database(path)
    for suffix in ("", "-wal", "-shm"):
        target = path.with_name(path.name + suffix)
        target.touch()
        target.chmod(0o644)
    store = Store(path)
    store.open()
    store.close()
    assert mode(folder) == 0o700
    assert mode(path) == 0o600


@pytest.mark.parametrize("keep", [0, 4096], ids=["whole-file", "after-the-first-page"])
def test_a_damaged_database_is_refused_and_left_as_it_is(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "tether.sqlite3"
    store = Store(path)
    store.open()
    for index in range(50):
        store.create_session_nowait(row(f"s_{index:03}_" + "x" * 200))
    store.close()
    data = path.read_bytes()
    assert len(data) > keep + 4096
    damaged = data[:keep] + os.urandom(len(data) - keep)
    path.write_bytes(damaged)
    with pytest.raises(StoreOpenError) as caught:
        Store(path).open()
    assert caught.value.reason == "damaged"
    assert str(path) in str(caught.value)
    assert "tether doctor" in str(caught.value)
    assert path.read_bytes() == damaged


def test_a_read_only_folder_is_named_with_the_cause(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    path = folder / "tether.sqlite3"
    with read_only_folder(folder), pytest.raises(StoreOpenError) as caught:
        Store(path).open()
    assert caught.value.reason == "unwritable"
    message = str(caught.value)
    assert f"{folder} is not writable" in message
    assert "Permission denied" in message or "Operation not permitted" in message


def test_doctor_looks_where_the_daemon_keeps_the_database(tmp_path: Path) -> None:
    from tether.clients.cli import doctor
    from tether.daemon.config import paths
    from tether.daemon.sessions import schema as daemon_store

    workspace = str(tmp_path / "project")
    assert doctor.database_path(Path(workspace)) == paths.database_path(workspace)
    assert doctor.SCHEMA_VERSION == daemon_store.SCHEMA_VERSION
