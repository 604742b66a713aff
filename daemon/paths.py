"""Where the daemon keeps things. Every path comes from platformdirs, so `HOME` and `XDG_*`
relocate all of it (the end-to-end tests give each daemon its own home this way)."""

import warnings
from pathlib import Path

import platformdirs

from tether.protocol.discovery import discovery_name, lock_name, workspace_key

APP = "tether"


def runtime_dir() -> Path:
    # Without a usable XDG_RUNTIME_DIR platformdirs falls back to /tmp/runtime-<uid> (created
    # owner-only) and warns; clients make the same choice, so the warning is only noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Path(platformdirs.user_runtime_dir(APP))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP))


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP))


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP))


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP))


def discovery_path(workspace: str) -> Path:
    return runtime_dir() / discovery_name(workspace)


def lock_path(workspace: str) -> Path:
    return runtime_dir() / lock_name(workspace)


def database_path(workspace: str) -> Path:
    return data_dir() / "workspaces" / workspace_key(workspace) / "tether.sqlite3"


def process_record_path(workspace: str) -> Path:
    """The record of the process groups the workspace's daemon owns (see ownership.py)."""
    return state_dir() / "workspaces" / workspace_key(workspace) / "processes.json"
