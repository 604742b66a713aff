"""The session database's schema, its version and migrations, and opening a database safely.

Rules:
- The schema is versioned (`PRAGMA user_version`, `SCHEMA_VERSION`). `open_database` migrates
  an older database one version at a time, all in one write transaction; a database from before
  the version existed (user_version 0, today's tables) is adopted as version 1; a database from a
  newer tether is refused before anything is written to it, not even the journal mode.
- WAL with `synchronous=NORMAL`: a killed daemon loses at most the batch being written, never
  corrupts the file.
- Only the owner can read it: the folder is 0700 and the database 0600 before SQLite first opens
  it (SQLite gives `-wal` and `-shm` the database's mode); wider existing modes are tightened.
- A database that cannot be used (damaged, unwritable, newer) raises `StoreOpenError` and is
  left as it was; the damage is found at open (the sessions table is read), not at the first
  request.
- Version 3 keeps an FTS5 index of prompts and answers (`search`), fed by a trigger on
  `events`; a Python whose SQLite lacks FTS5 is refused at open, before anything is written.
- `clients/cli/doctor.py` keeps its own copy of `SCHEMA_VERSION` so the CLI need not import the
  daemon; a test checks that the two agree.

Errors (`StoreClosed`, in `store.py`, is the third):

    StoreError              a store operation failed; the message names the database
    └── StoreOpenError      the database cannot be used (damaged, unwritable, from a newer
                            tether); nothing was changed. `reason` says which.
"""

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Literal

from tether.daemon.config.paths import private_dir, tighten

SCHEMA_VERSION = 4
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


def _latest(kind: str, field: str) -> str:
    """The `field` of the session's newest persisted event of `kind` that sets it (events are
    JSON text in a BLOB column, hence the cast)."""
    body = "CAST(body AS TEXT)"
    return (
        f"(SELECT json_extract({body}, '$.{field}') FROM events e"
        f" WHERE e.session_id = sessions.id AND json_extract({body}, '$.type') = '{kind}'"
        f" AND json_extract({body}, '$.{field}') IS NOT NULL ORDER BY e.seq DESC LIMIT 1)"
    )


_V2 = (
    # What a session list shows of a session that is not loaded: how its last turn ended,
    # the model it chose and its permission mode (kept up to date with the row from now on;
    # filled in here from the events of existing sessions).
    "ALTER TABLE sessions ADD COLUMN last_status TEXT",
    "ALTER TABLE sessions ADD COLUMN model TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN permission_mode TEXT",
    f"UPDATE sessions SET last_status = {_latest('turn_completed', 'status')},"
    f" model = coalesce({_latest('session_configured', 'model')}, ''),"
    f" permission_mode = {_latest('session_configured', 'permissionMode')}",
)


def searchable(rows: str) -> str:
    """A SELECT of the `search` rows (text, session_id, turn_id, item_id, kind) for the events
    `rows` yields (columns `raw`, the event's JSON text, and `sid`, its session): each completed
    prompt or answer of the agent itself, not a subagent's (their reports are tool output)
    nor a retried call's superseded text.

    Tool calls and their output are not indexed: they are mostly file contents and command
    output, which would bury the conversation's own words under every file the agent read,
    and would copy whatever a read file held (secrets included) into a second table."""

    def item(field: str) -> str:
        return f"json_extract(b, '$.item.{field}')"

    return (
        f"SELECT {item('text')}, sid, json_extract(b, '$.turnId'), {item('id')},"
        f" CASE {item('type')} WHEN 'user_message' THEN 'prompt' ELSE 'answer' END"
        # A body that is not JSON is read as `{}`: it is not indexed and its write still
        # goes through (SQLite may evaluate the conditions in any order).
        f" FROM (SELECT CASE WHEN json_valid(raw) THEN raw ELSE '{{}}' END AS b, sid"
        f" FROM ({rows}))"
        " WHERE json_extract(b, '$.type') = 'item_completed'"
        f" AND {item('type')} IN ('user_message', 'agent_message')"
        f" AND coalesce({item('parentItemId')}, '') = ''"
        f" AND NOT coalesce({item('superseded')}, 0)"
        f" AND coalesce({item('text')}, '') != ''"
    )


_SEARCH_COLUMNS = "search (text, session_id, turn_id, item_id, kind)"

# The event's head: msgspec writes a tagged struct's tag first and its fields in order, so an
# `item_completed` names its item's type within its first bytes (after the turn id), before
# the text, which may be long.
_HEAD = "substr(NEW.body, 1, 256)"
_might_be_searchable = (
    f"instr({_HEAD}, CAST('\"item_completed\"' AS BLOB))"
    f" AND (instr({_HEAD}, CAST('\"user_message\"' AS BLOB))"
    f" OR instr({_HEAD}, CAST('\"agent_message\"' AS BLOB)))"
)

SEARCH_BACKFILL = f"INSERT INTO {_SEARCH_COLUMNS} " + searchable(
    "SELECT CAST(body AS TEXT) AS raw, session_id AS sid FROM events ORDER BY session_id, seq"
)
"""Index every stored event: what the migration to version 3 does."""

_V3 = (
    # Forks: the session and turn a session was forked from.
    "ALTER TABLE sessions ADD COLUMN forked_from TEXT",
    "ALTER TABLE sessions ADD COLUMN forked_turn TEXT",
    # Full-text search over prompts and answers. A trigger keeps it current with every event
    # written (a fork's copied events included), so no code path can forget it; the sessions
    # already stored are indexed here, in the order they were written.
    "CREATE VIRTUAL TABLE search USING fts5(text, session_id UNINDEXED, turn_id UNINDEXED,"
    " item_id UNINDEXED, kind UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')",
    # The WHEN is a byte search that passes every prompt and answer (and few others), so
    # that most events, tool output above all, are written without being parsed as JSON.
    f"CREATE TRIGGER events_searchable AFTER INSERT ON events WHEN {_might_be_searchable}"
    f" BEGIN INSERT INTO {_SEARCH_COLUMNS}"
    f" {searchable('SELECT CAST(NEW.body AS TEXT) AS raw, NEW.session_id AS sid')}; END",
    SEARCH_BACKFILL,
)

_V4 = (
    # The git worktree a session works in (`isolation: "worktree"`): its folder, branch and
    # base commit, all null for a session that works in the workspace itself.
    "ALTER TABLE sessions ADD COLUMN worktree_root TEXT",
    "ALTER TABLE sessions ADD COLUMN worktree_branch TEXT",
    "ALTER TABLE sessions ADD COLUMN worktree_base TEXT",
)

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the first schema. IF NOT EXISTS, so that a database written before the schema
    # had a version (the same tables, user_version 0) is adopted unchanged.
    _V1,
    # 1 -> 2: the session list's columns (see `_V2`).
    _V2,
    # 2 -> 3: forks and full-text search (see `_V3`).
    _V3,
    # 3 -> 4: worktree sessions (see `_V4`).
    _V4,
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

OpenFailure = Literal["damaged", "unwritable", "newer", "other"]


class StoreError(Exception):
    """A store operation failed; the message names the database and SQLite's error."""


class StoreOpenError(StoreError):
    """The database cannot be used. Nothing in it was changed."""

    def __init__(self, path: Path, reason: OpenFailure, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason: OpenFailure = reason


def open_database(path: Path) -> sqlite3.Connection:
    """Open the database at `path`, creating, migrating or adopting it, in autocommit mode
    (callers open their own transactions). Blocking; the connection belongs to the calling
    thread. Raises `StoreOpenError` when it cannot be used; the file is then left as it was."""
    try:
        private_dir(path.parent)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        tighten(path, 0o600)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
    except (sqlite3.Error, OSError) as exc:
        raise _open_failure(path, exc) from exc
    try:
        # The version first: a newer tether's database must not even get our journal mode.
        _refuse_newer(conn, path)
        _require_fts5(conn, path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        _migrate(conn, path)
        # Reading the sessions table finds a damaged file now rather than at the first
        # request; each session's events are read, and so checked, when it loads.
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        for suffix in ("-wal", "-shm"):
            tighten(path.with_name(path.name + suffix), 0o600)
    except StoreOpenError:
        conn.close()
        raise
    except (sqlite3.Error, OSError) as exc:
        conn.close()
        raise _open_failure(path, exc) from exc
    return conn


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any; never raises."""
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
        rollback(conn)
        raise


def _require_fts5(conn: sqlite3.Connection, path: Path) -> None:
    """`StoreOpenError` unless this Python's SQLite has FTS5, which session search (and the
    trigger that feeds it on every write) needs."""
    (built_in,) = conn.execute("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()
    if built_in:
        return
    # The module may still be registered another way: ask a scratch database (~1 ms), so
    # that the probe touches nothing of the real one.
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(text)")
    except sqlite3.OperationalError as exc:
        raise fts5_missing(path, sqlite3.sqlite_version) from exc
    finally:
        probe.close()


def fts5_missing(path: Path, version: str) -> StoreOpenError:
    """The error for a Python whose SQLite (`version`) was built without FTS5."""
    return StoreOpenError(
        path,
        "other",
        f"this Python's SQLite ({version}) was built without FTS5, which tether needs for"
        f" its session database {path} (session search). Run tether with a Python whose"
        " sqlite3 module has FTS5 (python.org, uv and most distributions' builds do); the"
        " database was left as it is.",
    )


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
