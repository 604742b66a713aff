"""The store: one thread that owns the session database and runs every statement on it.

Rules:
- One dedicated thread owns the connection (opened by `schema.open_database`); every statement
  runs there, so the daemon is the only writer and never blocks trio on disk I/O.
- Writes are queued without waiting (`*_nowait`) and committed in batches: whatever queued up
  while the last batch was written goes into the next transaction. On the trio thread, the
  writes queued in one pass of the scheduler (a step's several events) are handed to the store
  thread together in the next pass (`tether.daemon.coalesce`): one wake of the thread, not one
  per write. `flush()` waits until everything queued before it has been written (or has
  failed, see below).
- Reads go through the same queue (`call`), so a read sees every write queued before it.
- A failure costs only the operation that failed. When any operation of a batch raises, or the
  commit fails (a full disk, a database made read-only, an I/O error), the batch is rolled back
  and its operations run again one at a time, each in a transaction of its own: those that
  fail again are rolled back alone and the others are kept. A failed `call` raises in the
  caller's task; a failed queued write has nobody waiting, so it is logged, counted in
  `statistics()` and passed to `on_write_error`.
- Nothing waits forever: if the thread ends for any reason, every pending and later call
  raises `StoreClosed`.
- The statements themselves and the rows they return are in `rows.py`; the schema, its
  migrations and the checks made at open are in `schema.py`.

Errors (`StoreError` and `StoreOpenError` are defined in `schema.py`):

    StoreError              a store operation failed; the message names the database
    ├── StoreClosed         the store is closed, or its thread stopped
    └── StoreOpenError      the database cannot be used (damaged, unwritable, from a newer
                            tether); nothing was changed. `reason` says which.
"""

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

from tether.daemon.coalesce import call_soon
from tether.daemon.logs.log import get_logger
from tether.daemon.sessions import rows
from tether.daemon.sessions.rows import QueryRefused, SearchRow, SessionRow, SnapshotRow
from tether.daemon.sessions.schema import StoreError, open_database, rollback

log = get_logger(__name__)

T = TypeVar("T")


class StoreClosed(StoreError):
    pass


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
        self._queue: queue.SimpleQueue[list[_Write] | _Call | None] = queue.SimpleQueue()
        self._writes: list[_Write] = []
        """Writes queued on the trio thread, handed to the store thread in the next pass."""
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
        self._hand_over()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._failed_writes, self._last_error)

    def _run(self) -> None:
        try:
            conn = open_database(self.path)
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
            ops: list[_Write | _Call] = []
            got = self._queue.get()
            while True:
                if got is None:
                    break
                if isinstance(got, list):
                    ops.extend(got)
                else:
                    ops.append(got)
                try:
                    got = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._inflight = ops
            if ops and not self._run_batch(conn, ops):
                for op in ops:
                    self._run_alone(conn, op)
            self._inflight = []
            for op in ops:
                if isinstance(op, _Call):
                    op.finish()
            if got is None:
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
            rollback(conn)
            return False
        return True

    def _run_alone(self, conn: sqlite3.Connection, op: _Write | _Call) -> None:
        try:
            conn.execute("BEGIN")
            result = op.fn(conn)
            conn.execute("COMMIT")
        except Exception as exc:
            rollback(conn)
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
        log.error(
            "a store write failed and was rolled back", path=self.path, what=op.what, error=exc
        )
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
        self._writes.append(_Write(fn, what))
        if len(self._writes) == 1 and not call_soon(self._hand_over):
            self._hand_over()

    def _hand_over(self) -> None:
        """Queue the writes held so far for the store thread, in one piece."""
        if self._writes:
            writes, self._writes = self._writes, []
            self._queue.put(writes)

    async def create_session(self, row: SessionRow) -> None:
        """Create the session `row` now; StoreError when it cannot be written."""
        await self.call(lambda c: rows.insert_session(c, row))

    def create_session_nowait(self, row: SessionRow) -> None:
        self._put(lambda c: rows.insert_session(c, row), f"creating session {row.id}")

    def append_event_nowait(self, session_id: str, seq: int, body: bytes) -> None:
        self._put(
            lambda c: rows.append_event(c, session_id, seq, body),
            f"saving event {seq} of session {session_id}",
        )

    def update_session_nowait(self, row: SessionRow) -> None:
        self._put(lambda c: rows.update_session(c, row), f"updating session {row.id}")

    def save_snapshot_nowait(self, row: SnapshotRow) -> None:
        """Keep a file's content from before a turn wrote it; a path's first snapshot in a
        turn wins (later ones are ignored)."""
        self._put(
            lambda c: rows.insert_snapshot(c, row),
            f"saving the undo snapshot of {row.path} (turn {row.turn_id})",
        )

    def update_snapshot_after_nowait(
        self, session_id: str, turn_id: str, path: str, after_digest: str | None
    ) -> None:
        self._put(
            lambda c: rows.update_snapshot_after(c, session_id, turn_id, path, after_digest),
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
        self._hand_over()  # the writes queued before it go first
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
        await self.call(lambda c: rows.mark_snapshots_undone(c, session_id, turn_id))

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session's events, undo snapshots and row, in one transaction; False
        when there was no such session."""
        return await self.call(lambda c: rows.delete_session(c, session_id))

    async def list_sessions(self) -> list[SessionRow]:
        return await self.call(rows.list_sessions)

    async def get_session(self, session_id: str) -> SessionRow | None:
        return await self.call(lambda c: rows.get_session(c, session_id))

    async def load_events(self, session_id: str) -> list[tuple[int, bytes]]:
        return await self.call(lambda c: rows.load_events(c, session_id))

    async def events_after(
        self, session_id: str, after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Up to `limit` of the session's events after `after_seq`, in order."""
        return await self.call(lambda c: rows.events_after(c, session_id, after_seq, limit))

    async def fork_session(self, row: SessionRow, source_id: str, before_turn: str | None) -> int:
        """Create the session `row` with a copy of the events of `source_id` from before the
        turn `before_turn` started (None: all of them), in one transaction; returns how many
        were copied. Everything queued before this call is copied (or not) with it."""

        def fork(conn: sqlite3.Connection) -> int:
            before = 2**62
            if before_turn is not None:
                started = rows.turn_started_seq(conn, source_id, before_turn)
                if started is None:
                    raise LookupError(f"turn {before_turn} of {source_id} has no turn_started")
                before = started
            return rows.fork_session(conn, row, source_id, before)

        return await self.call(fork)

    async def search(
        self, match: str, limit: int, session_id: str | None = None
    ) -> list[SearchRow]:
        """The best `limit` messages for the FTS5 query `match` (see `rows.search`); raises
        `QueryRefused` when SQLite cannot read the query (nothing else is rolled back)."""

        def run(conn: sqlite3.Connection) -> list[SearchRow] | QueryRefused:
            try:
                return rows.search(conn, match, limit, session_id)
            except QueryRefused as exc:
                return exc  # returned, not raised: a raise would roll back the whole batch

        found = await self.call(run)
        if isinstance(found, QueryRefused):
            raise found
        return found

    async def load_snapshots(self, session_id: str, turn_id: str) -> list[SnapshotRow]:
        """The turn's snapshots in the order the files were first written."""
        return await self.call(lambda c: rows.load_snapshots(c, session_id, turn_id))

    async def last_snapshot_turn(self, session_id: str) -> str | None:
        """The most recent turn of the session with snapshots not yet undone."""
        return await self.call(lambda c: rows.last_snapshot_turn(c, session_id))

    async def sessions_with_running_turn(self) -> list[str]:
        return await self.call(rows.sessions_with_running_turn)
