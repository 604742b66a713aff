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
    forked_from: str | None = None
    """The session this one was forked from (None: it was not forked)."""
    forked_turn: str | None = None
    """The last turn the fork copied from it (empty: none)."""
    worktree_root: str | None = None
    """The folder of the git worktree the session works in (None: the workspace itself)."""
    worktree_branch: str | None = None
    worktree_base: str | None = None


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
        "INSERT INTO sessions (id, title, created_at, updated_at, forked_from, forked_turn,"
        " worktree_root, worktree_branch, worktree_base) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.id,
            row.title,
            row.created_at,
            row.updated_at,
            row.forked_from,
            row.forked_turn,
            row.worktree_root,
            row.worktree_branch,
            row.worktree_base,
        ),
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
    conn.execute("DELETE FROM search WHERE session_id = ?", (session_id,))
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
        " model, permission_mode, forked_from, forked_turn, worktree_root, worktree_branch,"
        " worktree_base FROM sessions "
        f"{where} ORDER BY updated_at DESC",
        args,
    )
    return [SessionRow(*row) for row in cursor]


# --- events --------------------------------------------------------------------------------


def append_event(conn: sqlite3.Connection, session_id: str, seq: int, body: bytes) -> None:
    conn.execute(
        "INSERT INTO events (session_id, seq, body) VALUES (?, ?, ?)", (session_id, seq, body)
    )


def events_after(
    conn: sqlite3.Connection, session_id: str, after_seq: int, limit: int
) -> list[tuple[int, bytes]]:
    """Up to `limit` of the session's events with a seq above `after_seq`, in order."""
    return [
        (int(seq), bytes(body))
        for seq, body in conn.execute(
            "SELECT seq, body FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, after_seq, limit),
        )
    ]


def turn_started_seq(conn: sqlite3.Connection, session_id: str, turn_id: str) -> int | None:
    """The seq of the turn's `turn_started` event (None: the session has no such turn)."""
    found = conn.execute(
        "SELECT seq FROM (SELECT seq, CASE WHEN json_valid(CAST(body AS TEXT))"
        " THEN CAST(body AS TEXT) ELSE '{}' END AS b FROM events WHERE session_id = ?)"
        " WHERE json_extract(b, '$.type') = 'turn_started' AND json_extract(b, '$.turnId') = ?"
        " ORDER BY seq LIMIT 1",
        (session_id, turn_id),
    ).fetchone()
    return None if found is None else int(found[0])


def fork_session(conn: sqlite3.Connection, row: SessionRow, source_id: str, before: int) -> int:
    """Create the fork `row` holding the events of `source_id` with a seq below `before`
    (the `search` trigger indexes them as they are copied); returns how many were copied."""
    insert_session(conn, row)
    return conn.execute(
        "INSERT INTO events (session_id, seq, body)"
        " SELECT ?, seq, body FROM events WHERE session_id = ? AND seq < ? ORDER BY seq",
        (row.id, source_id, before),
    ).rowcount


def load_events(conn: sqlite3.Connection, session_id: str) -> list[tuple[int, bytes]]:
    return [
        (int(seq), bytes(body))
        for seq, body in conn.execute(
            "SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    ]


# --- search --------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class SearchRow:
    session_id: str
    title: str
    turn_id: str
    item_id: str
    kind: str
    snippet: str
    """The text around the match, each matched word between `MATCH_OPEN` and `MATCH_CLOSE`."""
    rank: float
    updated_at: float


MATCH_OPEN = "\x02"
MATCH_CLOSE = "\x03"
"""What `search` puts around each matched word of a snippet (control characters: a
message's text does not hold them)."""


class QueryRefused(Exception):
    """SQLite refused the FTS5 query; the message is its error."""


def search(
    conn: sqlite3.Connection, match: str, limit: int, session_id: str | None = None
) -> list[SearchRow]:
    """The best `limit` messages for the FTS5 query `match`, best first, of sessions still
    stored. Raises `QueryRefused` when SQLite cannot read the query."""
    only = " AND session_id = ?" if session_id is not None else ""
    args: tuple[object, ...] = (match, limit) if session_id is None else (match, session_id, limit)
    try:
        found = conn.execute(
            "SELECT h.session_id, s.title, h.turn_id, h.item_id, h.kind, h.snippet, h.rank,"
            " s.updated_at FROM (SELECT session_id, turn_id, item_id, kind,"
            f" snippet(search, 0, '{MATCH_OPEN}', '{MATCH_CLOSE}', '…', 16) AS snippet, rank"
            f" FROM search WHERE search MATCH ?{only} ORDER BY rank LIMIT ?) AS h"
            " JOIN sessions AS s ON s.id = h.session_id ORDER BY h.rank",
            args,
        ).fetchall()
    except sqlite3.OperationalError as exc:
        raise QueryRefused(str(exc)) from exc
    return [SearchRow(*row) for row in found]


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
