"""The SQLite store: sessions and their persisted events, one database per workspace.

Rules:
- One dedicated thread owns the connection; every statement runs there, so the daemon is the
  only writer and never blocks trio on disk I/O.
- Writes are queued without waiting (`*_nowait`) and committed in batches: whatever queued up
  while the last batch was written goes into the next transaction. `flush()` waits until
  everything queued before it has been written (or has failed, see below).
- Reads go through the same queue (`call`), so a read sees every write queued before it.
- WAL with `synchronous=NORMAL`: a killed daemon loses at most the batch being written, never
  corrupts the file.
- A failure costs only the operation that failed. When any operation of a batch raises, or the
  commit fails (a full disk, a database made read-only, an I/O error), the batch is rolled back
  and its operations run again one at a time, each in a transaction of its own: those that
  fail again are rolled back alone and the others are kept. A failed `call` raises in the
  caller's task; a failed queued write has nobody waiting, so it is logged, counted in
  `statistics()` and passed to `on_write_error`.
- Nothing waits forever: if the thread ends for any reason, every pending and later call
  raises `StoreClosed`.
- The schema is versioned (`PRAGMA user_version`, `SCHEMA_VERSION`). `open` migrates an older
  database one version at a time, each step in one transaction; a database from before the
  version existed (user_version 0, today's tables) is adopted as version 1; a database from a
  newer tether is refused and left as it is.
- Only the owner can read it: the folder is 0700 and the database 0600 before SQLite first opens
  it (SQLite gives `-wal` and `-shm` the database's mode); wider existing modes are tightened.

Errors:

    StoreError              a store operation failed; the message names the database
    ├── StoreClosed         the store is closed, or its thread stopped
    └── StoreOpenError      the database cannot be used (damaged, unwritable, from a newer
                            tether); nothing was changed. `reason` says which.
"""

import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

import trio

from tether.daemon.config.paths import private_dir, tighten

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 1
"""The schema this tether writes. Bump it with a new entry in `_MIGRATIONS`."""

_V1 = (
    """CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    turn_count INTEGER NOT NULL DEFAULT 0,
    running_turn TEXT
)""",
    """CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    path TEXT NOT NULL,
    content BLOB,
    size INTEGER,
    digest TEXT,
    after_digest TEXT,
    created_at REAL NOT NULL,
    undone INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, turn_id, path)
)""",
    "CREATE INDEX IF NOT EXISTS snapshots_by_session ON snapshots (session_id, id)",
)
# snapshots: a file as it was before a turn first wrote it, for undo. `path` is relative to the
# workspace; `content`, `size` and `digest` are NULL when the file did not exist;
# `after_digest` is the hash of what the turn last left there (NULL: no file).

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the first schema. IF NOT EXISTS, so that a database written before the schema
    # had a version (the same tables, user_version 0) is adopted unchanged.
    _V1,
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

OpenFailure = Literal["damaged", "unwritable", "newer", "other"]


class StoreError(Exception):
    """A store operation failed; the message names the database and SQLite's error."""


class StoreClosed(StoreError):
    pass


class StoreOpenError(StoreError):
    """The database cannot be used. Nothing in it was changed."""

    def __init__(self, path: Path, reason: OpenFailure, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason: OpenFailure = reason


class SessionRow:
    __slots__ = ("created_at", "id", "running_turn", "title", "turn_count", "updated_at")

    def __init__(
        self,
        id: str,
        title: str,
        created_at: float,
        updated_at: float,
        turn_count: int,
        running_turn: str | None,
    ) -> None:
        self.id = id
        self.title = title
        self.created_at = created_at
        self.updated_at = updated_at
        self.turn_count = turn_count
        self.running_turn = running_turn


class SnapshotRow:
    __slots__ = (
        "after_digest",
        "content",
        "created_at",
        "digest",
        "path",
        "session_id",
        "size",
        "turn_id",
        "undone",
    )

    def __init__(
        self,
        session_id: str,
        turn_id: str,
        path: str,
        content: bytes | None,
        size: int | None,
        digest: str | None,
        after_digest: str | None,
        created_at: float,
        undone: bool = False,
    ) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self.path = path
        self.content = content
        """None: the file did not exist before the turn."""
        self.size = size
        self.digest = digest
        self.after_digest = after_digest
        """The hash of the file as the turn left it; None: the turn left no file."""
        self.created_at = created_at
        self.undone = undone


_Op = Callable[[sqlite3.Connection], object]


class _Write:
    """A queued write nobody waits for; `what` names it in a failure report."""

    __slots__ = ("fn", "what")

    def __init__(self, fn: _Op, what: str) -> None:
        self.fn = fn
        self.what = what


class _Call:
    __slots__ = ("done", "error", "fn", "result", "token")

    def __init__(self, fn: _Op, token: trio.lowlevel.TrioToken) -> None:
        self.fn = fn
        self.token = token
        self.done = trio.Event()
        self.result: object = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.done.set)


class StoreStatistics:
    __slots__ = ("failed_writes", "last_error")

    def __init__(self, failed_writes: int, last_error: str) -> None:
        self.failed_writes = failed_writes
        """Queued writes that failed (and were rolled back) since the store opened."""
        self.last_error = last_error


WriteErrorHandler = Callable[[str, BaseException], None]
"""Told, on the store thread, what queued write failed and why. Must not block."""


class Store:
    def __init__(self, path: Path, *, on_write_error: WriteErrorHandler | None = None) -> None:
        self.path = path
        self.on_write_error = on_write_error
        self._queue: queue.SimpleQueue[_Write | _Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._failed_writes = 0
        self._last_error = ""
        self._inflight: list[_Write | _Call] = []

    # --- lifecycle -----------------------------------------------------------------------

    def open(self) -> None:
        """Open the database, creating, migrating or adopting it. Blocking. Raises
        `StoreOpenError` when it cannot be used; the file is then left as it was."""
        self._thread = threading.Thread(target=self._run, name="tether-store", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._open_error is not None:
            raise self._open_error

    def close(self) -> None:
        """Write everything queued, then stop the thread. Blocking; call once at shutdown."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._failed_writes, self._last_error)

    def _connect(self) -> sqlite3.Connection:
        try:
            private_dir(self.path.parent)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            tighten(self.path, 0o600)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        except (sqlite3.Error, OSError) as exc:
            raise _open_failure(self.path, exc) from exc
        try:
            # The version first: a newer tether's database must not even get our journal mode.
            _refuse_newer(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            _migrate(conn, self.path)
            # Reading the sessions table finds a damaged file now rather than at the first
            # request; each session's events are read, and so checked, when it loads.
            conn.execute("SELECT count(*) FROM sessions").fetchone()
            for suffix in ("-wal", "-shm"):
                tighten(self.path.with_name(self.path.name + suffix), 0o600)
        except StoreOpenError:
            conn.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            conn.close()
            raise _open_failure(self.path, exc) from exc
        return conn

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._stopped.set()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(conn)
        except BaseException:
            log.exception("the store thread failed; the store is closed")
        finally:
            self._stopped.set()
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            for op in self._inflight:
                if isinstance(op, _Call):
                    op.result, op.error = None, StoreClosed(f"the store {self.path} failed")
                    op.finish()
            self._fail_pending()

    def _serve(self, conn: sqlite3.Connection) -> None:
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            ops = self._inflight = [op for op in batch if op is not None]
            if ops and not self._run_batch(conn, ops):
                for op in ops:
                    self._run_alone(conn, op)
            self._inflight = []
            for op in ops:
                if isinstance(op, _Call):
                    op.finish()
            if len(ops) != len(batch):
                return

    def _run_batch(self, conn: sqlite3.Connection, ops: list[_Write | _Call]) -> bool:
        """Run `ops` in one transaction. False, with everything rolled back, if any failed."""
        try:
            conn.execute("BEGIN")
            for op in ops:
                result = op.fn(conn)
                if isinstance(op, _Call):
                    op.result = result
            conn.execute("COMMIT")
        except Exception:
            _rollback(conn)
            return False
        return True

    def _run_alone(self, conn: sqlite3.Connection, op: _Write | _Call) -> None:
        try:
            conn.execute("BEGIN")
            result = op.fn(conn)
            conn.execute("COMMIT")
        except Exception as exc:
            _rollback(conn)
            if isinstance(op, _Call):
                op.result, op.error = None, exc
            else:
                self._report(op, exc)
        else:
            if isinstance(op, _Call):
                op.result, op.error = result, None

    def _report(self, op: _Write, exc: BaseException) -> None:
        self._failed_writes += 1
        self._last_error = f"{op.what}: {exc}"
        log.error("store %s: %s failed and was rolled back: %s", self.path, op.what, exc)
        if self.on_write_error is not None:
            try:
                self.on_write_error(op.what, exc)
            except Exception:
                log.exception("the store's on_write_error failed")

    def _fail_pending(self) -> None:
        """Answer every call still queued: the thread that would have run them is gone."""
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(op, _Call):
                op.error = StoreClosed(f"the store {self.path} is closed")
                op.finish()

    # --- queued writes ----------------------------------------------------------------------

    def _put(self, fn: _Op, what: str) -> None:
        if self._closed or self._stopped.is_set():
            raise StoreClosed(f"the store {self.path} is closed")
        self._queue.put(_Write(fn, what))

    def create_session_nowait(self, row: SessionRow) -> None:
        self._put(
            lambda c: c.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (row.id, row.title, row.created_at, row.updated_at),
            ),
            f"creating session {row.id}",
        )

    def append_event_nowait(self, session_id: str, seq: int, body: bytes) -> None:
        self._put(
            lambda c: c.execute(
                "INSERT INTO events (session_id, seq, body) VALUES (?, ?, ?)",
                (session_id, seq, body),
            ),
            f"saving event {seq} of session {session_id}",
        )

    def update_session_nowait(
        self,
        session_id: str,
        *,
        updated_at: float,
        title: str,
        turn_count: int,
        running_turn: str | None,
    ) -> None:
        self._put(
            lambda c: c.execute(
                "UPDATE sessions SET updated_at = ?, title = ?, turn_count = ?, running_turn = ?"
                " WHERE id = ?",
                (updated_at, title, turn_count, running_turn, session_id),
            ),
            f"updating session {session_id}",
        )

    def save_snapshot_nowait(self, row: SnapshotRow) -> None:
        """Keep a file's content from before a turn wrote it; a path's first snapshot in a
        turn wins (later ones are ignored)."""
        self._put(
            lambda c: c.execute(
                "INSERT OR IGNORE INTO snapshots (session_id, turn_id, path, content, size,"
                " digest, after_digest, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.session_id,
                    row.turn_id,
                    row.path,
                    row.content,
                    row.size,
                    row.digest,
                    row.after_digest,
                    row.created_at,
                ),
            ),
            f"saving the undo snapshot of {row.path} (turn {row.turn_id})",
        )

    def update_snapshot_after_nowait(
        self, session_id: str, turn_id: str, path: str, after_digest: str | None
    ) -> None:
        self._put(
            lambda c: c.execute(
                "UPDATE snapshots SET after_digest = ? WHERE session_id = ? AND turn_id = ?"
                " AND path = ?",
                (after_digest, session_id, turn_id, path),
            ),
            f"updating the undo snapshot of {path} (turn {turn_id})",
        )

    # --- reads and awaited writes ---------------------------------------------------------

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in a transaction on the store thread after everything queued so far;
        return its result. Raises `StoreError` (from SQLite's error) when it fails, with
        whatever it wrote rolled back; other exceptions `fn` raises come through as they are.

        Cancelling the caller does not stop `fn`; it only stops waiting for it.
        """
        if self._closed or self._stopped.is_set():
            raise StoreClosed(f"the store {self.path} is closed")
        call = _Call(fn, trio.lowlevel.current_trio_token())
        self._queue.put(call)
        if self._stopped.is_set():
            self._fail_pending()  # the thread ended between the check and the put
        await call.done.wait()
        if isinstance(call.error, sqlite3.Error):
            raise StoreError(f"store {self.path}: {call.error}") from call.error
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    async def flush(self) -> None:
        """Wait until every write queued before this has been written, or has failed and
        been reported."""
        await self.call(lambda c: None)

    async def mark_snapshots_undone(self, session_id: str, turn_id: str) -> None:
        await self.call(
            lambda c: c.execute(
                "UPDATE snapshots SET undone = 1 WHERE session_id = ? AND turn_id = ?",
                (session_id, turn_id),
            )
        )

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session's events, undo snapshots and row, in one transaction; False
        when there was no such session."""

        def delete(c: sqlite3.Connection) -> bool:
            c.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM snapshots WHERE session_id = ?", (session_id,))
            return c.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0

        return await self.call(delete)

    async def list_sessions(self) -> list[SessionRow]:
        return await self.call(_list_sessions)

    async def get_session(self, session_id: str) -> SessionRow | None:
        rows = await self.call(lambda c: _select_sessions(c, "WHERE id = ?", (session_id,)))
        return rows[0] if rows else None

    async def load_events(self, session_id: str) -> list[tuple[int, bytes]]:
        return await self.call(
            lambda c: [
                (int(seq), bytes(body))
                for seq, body in c.execute(
                    "SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                )
            ]
        )

    async def load_snapshots(self, session_id: str, turn_id: str) -> list[SnapshotRow]:
        """The turn's snapshots in the order the files were first written."""
        return await self.call(
            lambda c: [
                SnapshotRow(
                    session_id=session_id,
                    turn_id=turn_id,
                    path=str(path),
                    content=None if content is None else bytes(content),
                    size=size,
                    digest=digest,
                    after_digest=after_digest,
                    created_at=float(created_at),
                    undone=bool(undone),
                )
                for path, content, size, digest, after_digest, created_at, undone in c.execute(
                    "SELECT path, content, size, digest, after_digest, created_at, undone"
                    " FROM snapshots WHERE session_id = ? AND turn_id = ? ORDER BY id",
                    (session_id, turn_id),
                )
            ]
        )

    async def last_snapshot_turn(self, session_id: str) -> str | None:
        """The most recent turn of the session with snapshots not yet undone."""
        row = await self.call(
            lambda c: c.execute(
                "SELECT turn_id FROM snapshots WHERE session_id = ? AND undone = 0"
                " ORDER BY id DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def sessions_with_running_turn(self) -> list[str]:
        return await self.call(
            lambda c: [
                str(r[0])
                for r in c.execute("SELECT id FROM sessions WHERE running_turn IS NOT NULL")
            ]
        )


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back on its own (a full disk, an I/O error).
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to `SCHEMA_VERSION` in one write transaction (which also proves the
    database writable); refuse a newer one."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _refuse_newer(conn, path)
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _refuse_newer(conn: sqlite3.Connection, path: Path) -> int:
    """The database's schema version; `StoreOpenError` when it is newer than ours."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StoreOpenError(
            path,
            "newer",
            f"the session database {path} was written by a newer tether (schema version"
            f" {version}; this tether knows up to {SCHEMA_VERSION}). Update tether, or move"
            " the file aside to start with no sessions; it was left as it is.",
        )
    return version


def _open_failure(path: Path, exc: sqlite3.Error | OSError) -> StoreOpenError:
    if isinstance(exc, OSError):
        cause = f"{exc.strerror or exc} ({exc.filename or path})"
    else:
        cause = str(exc)
    name = getattr(exc, "sqlite_errorname", "")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return StoreOpenError(
            path,
            "damaged",
            f"the session database {path} is damaged: {cause}. It was left as it is; run"
            " `tether doctor` to check it and for how to recover.",
        )
    unwritable = isinstance(exc, PermissionError) or name.startswith(
        ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")
    )
    if unwritable:
        folder = path.parent
        while not folder.exists():
            folder = folder.parent
        hint = f"{folder} is not writable" if not os.access(folder, os.W_OK) else ""
        return StoreOpenError(
            path,
            "unwritable",
            f"cannot write the session database {path}: {cause}"
            + (f"; {hint}" if hint else "")
            + ". The daemon keeps its sessions there: make it writable by this user.",
        )
    return StoreOpenError(path, "other", f"cannot open the session database {path}: {cause}")


def _select_sessions(
    conn: sqlite3.Connection, where: str = "", args: tuple[object, ...] = ()
) -> list[SessionRow]:
    cursor = conn.execute(
        "SELECT id, title, created_at, updated_at, turn_count, running_turn FROM sessions "
        f"{where} ORDER BY updated_at DESC",
        args,
    )
    return [SessionRow(*row) for row in cursor]


def _list_sessions(conn: sqlite3.Connection) -> list[SessionRow]:
    return _select_sessions(conn)
