"""Whether the user trusts a workspace's skills, remembered across daemon restarts.

A workspace's skills are instructions written by whoever can commit to the repository, so the
first time the agent would use one the user is asked; a yes is kept in a small owner-only
JSON file in the daemon's state folder for this workspace (`skills-trust.json`), written
atomically. The file says who answered and when; a missing or unreadable file means "not
trusted", so a damaged record costs one more question, never a silent yes.
"""

import json
import time
from pathlib import Path

from tether.daemon.private_json import write_private_json


class WorkspaceTrust:
    """The user's trust in one workspace's skills, kept in `path` (None: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.trusted = self._read()

    def _read(self) -> bool:
        if self.path is None:
            return False
        try:
            record: object = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("trusted") is True  # pyright: ignore[reportUnknownMemberType]

    def grant(self, by: str = "") -> None:
        """Trust the workspace's skills from now on, and remember it. Blocking (a small
        write); an OSError leaves it trusted for this daemon's life only and propagates."""
        self.trusted = True
        if self.path is None:
            return
        write_private_json(self.path, {"trusted": True, "by": by, "at": time.time()})
