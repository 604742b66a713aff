"""Where the clients keep their own things. What daemon and clients must agree on (the runtime
dir, the discovery and lock files, the daemon's log) is `tether.protocol.places`."""

from pathlib import Path

from tether.protocol.places import state_dir
from tether.protocol.workspace_files import workspace_key


def history_path(workspace: str | Path) -> Path:
    """The interactive prompt's input history for `workspace` (one file per workspace)."""
    return state_dir() / "history" / f"{workspace_key(str(workspace))}.txt"
