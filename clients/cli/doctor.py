"""`tether doctor`: check what the daemon keeps for a workspace, without the daemon.

It finds the session database where the daemon keeps it, opens it read-only (SQLite may add
empty `-wal`/`-shm` files beside it; the database itself is not written), runs
`PRAGMA integrity_check`, reads the schema version, and checks that the files and folders are
owner-only. For each problem it says how to recover. Exit code 0 when all is well, 1 otherwise.
"""

import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from tether.protocol.discovery import workspace_key
from tether.protocol.places import data_dir

SCHEMA_VERSION = 4
"""The newest schema this tether reads; the daemon's `schema.SCHEMA_VERSION`."""


def database_path(workspace: Path) -> Path:
    """Where the daemon keeps the workspace's sessions (the daemon's `paths.database_path`)."""
    return data_dir() / "workspaces" / workspace_key(str(workspace)) / "tether.sqlite3"


def integrity(path: Path) -> tuple[list[str], int | None]:
    """`PRAGMA integrity_check`'s lines (["ok"] when sound) and the schema version, read
    through a read-only connection; a database SQLite cannot read gives its error."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"cannot open: {exc}"], None
    try:
        lines = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)").fetchall()]
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        return [str(exc)], None
    finally:
        conn.close()
    return lines, version


def _loose(path: Path, allowed: int) -> str:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return ""
    return f"{path} is {mode:o}; run `chmod {allowed:o} {path}`" if mode & ~allowed else ""


def report(workspace: Path, daemon_pid: int | None) -> tuple[list[str], bool]:
    """What to print, and whether everything is well."""
    path = database_path(workspace)
    lines = [f"workspace: {workspace}", f"database:  {path}"]
    running = f"running (pid {daemon_pid})" if daemon_pid else "not running"
    lines.append(f"daemon:    {running}")
    if not path.exists():
        lines.append("integrity: no database yet (the daemon creates it on first start)")
        return lines, True
    healthy = True
    found, version = integrity(path)
    if found == ["ok"]:
        lines.append("integrity: ok")
    else:
        healthy = False
        lines.append("integrity: DAMAGED")
        lines += [f"  {line}" for line in found]
        aside = path.with_name(path.name + ".damaged")
        lines += [
            "To recover: stop the daemon (`tether daemon stop`) and move the database aside,",
            f"  mv {path} {aside}",
            "  (and the -wal and -shm files beside it, if any). The next start creates a fresh",
            "  database; the sessions in the old file are no longer listed. `sqlite3 "
            f"{aside} .recover` may salvage some of them.",
        ]
    if version is not None:
        if version > SCHEMA_VERSION:
            healthy = False
            lines.append(
                f"schema:    version {version}, newer than this tether reads ({SCHEMA_VERSION});"
                " update tether"
            )
        else:
            lines.append(f"schema:    version {version}")
    loose = [
        problem
        for problem in (
            *(_loose(path.with_name(path.name + s), 0o600) for s in ("", "-wal", "-shm")),
            _loose(path.parent, 0o700),
        )
        if problem
    ]
    if loose:
        healthy = False
        lines += ["permissions: readable by others:", *(f"  {p}" for p in loose)]
    else:
        lines.append("permissions: owner-only")
    return lines, healthy
