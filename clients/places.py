"""Where a workspace's daemon and its clients meet on disk: the runtime dir holding the
discovery and lock files, the daemon's log and the file its stderr goes to. Every path comes
from platformdirs, so `HOME` and `XDG_*` relocate all of it.

Both sides must compute the same paths, so both take them from here: this is the one module of
`tether.clients` the daemon imports, and it imports nothing of tether but the protocol's
`tether.protocol.workspace_files`, which names the files (and no msgspec: a client that has
to start the daemon gets here before it imports anything heavy).
"""

import warnings
from pathlib import Path

import platformdirs

from tether.protocol.workspace_files import discovery_name, lock_name, workspace_key

APP = "tether"


def runtime_dir() -> Path:
    # Without a usable XDG_RUNTIME_DIR platformdirs falls back to /tmp/runtime-<uid> (created
    # owner-only) and warns; daemon and clients make the same choice, so it is only noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Path(platformdirs.user_runtime_dir(APP))


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP))


def discovery_path(workspace: str | Path) -> Path:
    return runtime_dir() / discovery_name(str(workspace))


def lock_path(workspace: str | Path) -> Path:
    return runtime_dir() / lock_name(str(workspace))


def log_path(workspace: str | Path) -> Path:
    """The daemon's log for `workspace`: JSON lines, rotated to `.log.1`, `.log.2`, ...
    (see docs/logs.md; `tether daemon logs` reads them)."""
    return log_dir() / f"daemon-{workspace_key(str(workspace))}.log"


def stderr_path(workspace: str | Path) -> Path:
    """Where the stderr of a daemon a client started goes: its refusals to start, and a
    crash's traceback (clients quote it when the daemon fails them)."""
    return log_dir() / f"daemon-{workspace_key(str(workspace))}.stderr"


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP))


def history_path(workspace: str | Path) -> Path:
    """The interactive prompt's input history for `workspace` (one file per workspace)."""
    return state_dir() / "history" / f"{workspace_key(str(workspace))}.txt"
