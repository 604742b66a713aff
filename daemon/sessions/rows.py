"""The session database's rows as typed values, and the statements that read and write them.

Rules:
- Every function here takes the store thread's connection and runs inside the transaction the
  store opened for it: none begins, commits or rolls back, so a failure is the store's to roll
  back (see `store.py`).
- Reads return plain Python values (`bytes`, not SQLite's buffers; `bool`, not 0/1), so a row
  is safe to hand to trio once it leaves the store thread.
- Sessions are listed most recently updated first; events in `seq` order; a turn's snapshots in
  the order its files were first written.
"""

import sqlite3
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class SessionRow:
    id: str
    title: str
    created_at: float
    updated_at: float
    turn_count: int
    running_turn: str | None
    last_status: str | None = None
    """The status of the session's last turn (None: it has had none)."""
    model: str = ""
    """The model the session chose (empty: the configured one)."""
    permission_mode: str | None = None
    """The session's permission mode when it was last used (None: not recorded yet)."""


@dataclass(slots=True, eq=False)
class SnapshotRow:
    session_id: str
    turn_id: str
    path: str
    content: bytes | None
    """None: the file did not exist before the turn."""
    size: int | None
    digest: str | None
    after_digest: str | None
    """The hash of the file as the turn left it; None: the turn left no file."""
    created_at: float
    undone: bool = False


# --- sessions ------------------------------------------------------------------------------


def insert_session(conn: sqlite3.Connection, row: SessionRow) -> None:
    conn.execute(
        "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
        (row.id, row.title, row.created_at, row.updated_at),
    )


def update_session(conn: sqlite3.Connection, row: SessionRow) -> None:
    """Save what changes of a session (everything but `id` and `created_at`)."""
    conn.execute(
        "UPDATE sessions SET updated_at = ?, title = ?, turn_count = ?, running_turn = ?,"
        " last_status = ?, model = ?, permission_mode = ? WHERE id = ?",
        (
            row.updated_at,
            row.title,
            row.turn_count,
            row.running_turn,
            row.last_status,
            row.model,
            row.permission_mode,
            row.id,
        ),
    )


def delete_session(conn: sqlite3.Connection, session_id: str) -> bool:
    conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM snapshots WHERE session_id = ?", (session_id,))
    return conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0


def list_sessions(conn: sqlite3.Connection) -> list[SessionRow]:
    return _select_sessions(conn)


def get_session(conn: sqlite3.Connection, session_id: str) -> SessionRow | None:
    rows = _select_sessions(conn, "WHERE id = ?", (session_id,))
    return rows[0] if rows else None


def sessions_with_running_turn(conn: sqlite3.Connection) -> list[str]:
    return [
        str(r[0]) for r in conn.execute("SELECT id FROM sessions WHERE running_turn IS NOT NULL")
    ]


def _select_sessions(
    conn: sqlite3.Connection, where: str = "", args: tuple[object, ...] = ()
) -> list[SessionRow]:
    cursor = conn.execute(
        "SELECT id, title, created_at, updated_at, turn_count, running_turn, last_status,"
        " model, permission_mode FROM sessions "
        f"{where} ORDER BY updated_at DESC",
        args,
    )
    return [SessionRow(*row) for row in cursor]


# --- events --------------------------------------------------------------------------------


def append_event(conn: sqlite3.Connection, session_id: str, seq: int, body: bytes) -> None:
    conn.execute(
        "INSERT INTO events (session_id, seq, body) VALUES (?, ?, ?)", (session_id, seq, body)
    )


def load_events(conn: sqlite3.Connection, session_id: str) -> list[tuple[int, bytes]]:
    return [
        (int(seq), bytes(body))
        for seq, body in conn.execute(
            "SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    ]


# --- undo snapshots ------------------------------------------------------------------------


def insert_snapshot(conn: sqlite3.Connection, row: SnapshotRow) -> None:
    # OR IGNORE: a path's first snapshot in a turn wins, so undo restores the file as it was.
    conn.execute(
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


def update_snapshot_after(
    conn: sqlite3.Connection, session_id: str, turn_id: str, path: str, after_digest: str | None
) -> None:
    conn.execute(
        "UPDATE snapshots SET after_digest = ? WHERE session_id = ? AND turn_id = ? AND path = ?",
        (after_digest, session_id, turn_id, path),
    )


def mark_snapshots_undone(conn: sqlite3.Connection, session_id: str, turn_id: str) -> None:
    conn.execute(
        "UPDATE snapshots SET undone = 1 WHERE session_id = ? AND turn_id = ?",
        (session_id, turn_id),
    )


def load_snapshots(conn: sqlite3.Connection, session_id: str, turn_id: str) -> list[SnapshotRow]:
    return [
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
        for path, content, size, digest, after_digest, created_at, undone in conn.execute(
            "SELECT path, content, size, digest, after_digest, created_at, undone"
            " FROM snapshots WHERE session_id = ? AND turn_id = ? ORDER BY id",
            (session_id, turn_id),
        )
    ]


def last_snapshot_turn(conn: sqlite3.Connection, session_id: str) -> str | None:
    row = conn.execute(
        "SELECT turn_id FROM snapshots WHERE session_id = ? AND undone = 0"
        " ORDER BY id DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return None if row is None else str(row[0])
