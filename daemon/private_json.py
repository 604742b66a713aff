"""A small owner-only JSON record in the daemon's state folder, replaced atomically: what the
user decided about a workspace (its skills trusted, its MCP servers approved) must survive a
restart and never be read half-written."""

import contextlib
import json
import os
import tempfile
from pathlib import Path


def write_private_json(path: Path, value: object) -> None:
    """Write `value` as JSON to `path` (mode 0600, its folder created 0700): a temporary file
    beside it, synced, then renamed over it. Blocking; an OSError propagates and leaves the
    old file as it was."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
