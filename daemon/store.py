"""The SQLite store: sessions and their persisted events, one database per workspace.

Rules:
- One dedicated thread owns the connection; every statement runs there, so the daemon is the
  only writer and never blocks trio on disk I/O.
- Writes are queued without waiting (`*_nowait`) and committed in batches: whatever queued up
  while the last batch was written goes into the next transaction. `flush()` waits until
  everything queued before it is on disk.
- Reads go through the same queue (`call`), so a read sees every write queued before it.
- WAL with `synchronous=NORMAL`: a killed daemon loses at most the batch being written, never
  corrupts the file.
"""

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    turn_count INTEGER NOT NULL DEFAULT 0,
    running_turn TEXT
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
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
);
CREATE INDEX IF NOT EXISTS snapshots_by_session ON snapshots (session_id, id);
"""
# snapshots: a file as it was before a turn first wrote it, for undo. `path` is relative to the
# workspace; `content`, `size` and `digest` are NULL when the file did not exist;
# `after_digest` is the hash of what the turn last left there (NULL: no file).


class StoreClosed(Exception):
    pass


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


class _Call:
    __slots__ = ("done", "error", "fn", "result", "token")

    def __init__(self, fn: _Op, token: trio.lowlevel.TrioToken) -> None:
        self.fn = fn
        self.token = token
        self.done = trio.Event()
        self.result: object = None
        self.error: BaseException | None = None


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[_Op | _Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ready = threading.Event()
        self._open_error: BaseException | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
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

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        return conn

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        stopping = False
        while not stopping:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            conn.execute("BEGIN")
            calls: list[_Call] = []
            for op in batch:
                if op is None:
                    stopping = True
                elif isinstance(op, _Call):
                    try:
                        op.result = op.fn(conn)
                    except Exception as exc:
                        op.error = exc
                    calls.append(op)
                else:
                    op(conn)
            conn.execute("COMMIT")
            for call in calls:
                with contextlib.suppress(trio.RunFinishedError):
                    call.token.run_sync_soon(call.done.set)
        conn.close()

    # --- queued writes ----------------------------------------------------------------------

    def _put(self, op: _Op) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")
        self._queue.put(op)

    def create_session_nowait(self, row: SessionRow) -> None:
        self._put(
            lambda c: c.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (row.id, row.title, row.created_at, row.updated_at),
            )
        )

    def append_event_nowait(self, session_id: str, seq: int, body: bytes) -> None:
        self._put(
            lambda c: c.execute(
                "INSERT INTO events (session_id, seq, body) VALUES (?, ?, ?)",
                (session_id, seq, body),
            )
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
            )
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
            )
        )

    def update_snapshot_after_nowait(
        self, session_id: str, turn_id: str, path: str, after_digest: str | None
    ) -> None:
        self._put(
            lambda c: c.execute(
                "UPDATE snapshots SET after_digest = ? WHERE session_id = ? AND turn_id = ?"
                " AND path = ?",
                (after_digest, session_id, turn_id, path),
            )
        )

    def mark_snapshots_undone_nowait(self, session_id: str, turn_id: str) -> None:
        self._put(
            lambda c: c.execute(
                "UPDATE snapshots SET undone = 1 WHERE session_id = ? AND turn_id = ?",
                (session_id, turn_id),
            )
        )

    # --- reads (and waiting for writes) ---------------------------------------------------

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` on the store thread after everything queued so far; return its result.

        Cancelling the caller does not stop `fn`; it only stops waiting for it.
        """
        if self._closed:
            raise StoreClosed("the store is closed")
        call = _Call(fn, trio.lowlevel.current_trio_token())
        self._queue.put(call)
        await call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    async def flush(self) -> None:
        await self.call(lambda c: None)

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
