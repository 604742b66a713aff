"""The recent workspaces: the roots daemons have served on this machine, newest first, so that
`tether web` can offer to start one that is not running.

Rules:
- each daemon puts its workspace first once it serves (`remember`), so the list is only ever
  what this user's daemons have served, never a path a client named;
- at most `KEEP` roots; roots that are no longer folders are dropped when it is written;
- the file (`tether.protocol.places.recent_workspaces_path`) is owner-only JSON
  `{"roots": ["/abs/path", ...]}`, replaced atomically; daemons starting at once take turns
  through an `flock` on a file beside it, so none loses another's root;
- failing to write it is logged and changes nothing else: it is a convenience.
"""

import contextlib
import fcntl
import os
from pathlib import Path

import msgspec

from tether.daemon.logs.log import get_logger
from tether.daemon.private_json import write_private_json
from tether.protocol.discovery import RecentWorkspaces
from tether.protocol.places import recent_workspaces_path

log = get_logger(__name__)

KEEP = 20


def read_roots(path: Path) -> list[str]:
    """The roots recorded at `path`, newest first; [] when there is no readable list."""
    try:
        recorded = msgspec.json.decode(path.read_bytes(), type=RecentWorkspaces)
    except (OSError, msgspec.DecodeError):
        return []
    return [root for root in recorded.roots if os.path.isabs(root)]


def remember(workspace: Path, path: Path | None = None) -> None:
    """Put `workspace` first in the recent list (at `path`, default the user's). Blocking;
    never raises for the file's sake (an OSError is logged)."""
    path = recent_workspaces_path() if path is None else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            root = str(workspace)
            roots = [root, *(r for r in read_roots(path) if r != root)]
            kept = [r for r in roots if os.path.isdir(r)][:KEEP]
            write_private_json(path, {"roots": kept})
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    except OSError as exc:
        log.warning("the recent workspaces list was not updated", path=path, error=str(exc))
