"""Where the daemon keeps things. Every path comes from `tether.protocol.places` (the XDG base
directories on Linux, platformdirs elsewhere), so `HOME` and `XDG_*` relocate all of it (the
end-to-end tests give each daemon its own home this way).

What the daemon keeps holds conversations and tokens, so its folders are owner-only (0700):
`private_dirs()` creates them so and tightens existing ones at start; the files in them are
created 0600.
"""

import contextlib
import stat
from pathlib import Path

from tether.protocol.discovery import workspace_key

# What clients must find (the runtime dir, discovery and lock files, the log, the database
# `tether doctor` checks, the config file `--remote` reads) is computed in one place both
# sides import.
from tether.protocol.places import (
    config_dir,
    data_dir,
    discovery_path,
    former_lock_path,
    lock_path,
    log_dir,
    log_path,
    runtime_dir,
    state_dir,
    workspace_data_dir,
)

__all__ = [
    "config_dir",
    "data_dir",
    "discovery_path",
    "former_lock_path",
    "lock_path",
    "log_dir",
    "log_path",
    "runtime_dir",
    "state_dir",
    "workspace_data_dir",
]


def private_dirs() -> list[Path]:
    """The daemon's own folders; each is made owner-only at start (see `private_dir`)."""
    return [data_dir(), data_dir() / "workspaces", state_dir(), log_dir()]


def database_path(workspace: str) -> Path:
    return workspace_data_dir(workspace) / "tether.sqlite3"


def process_record_path(workspace: str) -> Path:
    """The record of the process groups the workspace's daemon owns (see ownership.py)."""
    return state_dir() / "workspaces" / workspace_key(workspace) / "processes.json"


def user_skills_dir() -> Path:
    """The user's own skills, beside `config.toml`."""
    return config_dir() / "skills"


def workspace_trust_path(workspace: str) -> Path:
    """Whether the user trusts the workspace (see `tether.daemon.workspace_trust`)."""
    return state_dir() / "workspaces" / workspace_key(workspace) / "workspace-trust.json"


def skills_trust_path(workspace: str) -> Path:
    """Whether the user trusts the workspace's skills (see `tether.daemon.skills.trust`)."""
    return state_dir() / "workspaces" / workspace_key(workspace) / "skills-trust.json"


def mcp_approvals_path(workspace: str) -> Path:
    """The workspace's MCP servers the user approved (see `tether.daemon.mcp.approvals`)."""
    return state_dir() / "workspaces" / workspace_key(workspace) / "mcp-approvals.json"


def private_dir(path: Path) -> None:
    """Make `path` a folder only its owner may enter: missing folders on the way are created
    0700, and `path` itself is tightened to 0700 if it is wider."""
    missing: list[Path] = []
    folder = path
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    tighten(path, 0o700)


def tighten(path: Path, mode: int) -> None:
    """Remove from `path`'s mode every bit not in `mode` (no-op when it is missing or
    already as tight)."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if current & ~mode:
        path.chmod(current & mode)
