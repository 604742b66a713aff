"""Which of a workspace's MCP servers the user approved, remembered across daemon restarts.

A workspace server runs a program the repository names, so it starts only once the user has
approved it. The approval is for the server's whole definition (its fingerprint): a changed
command, argument or variable asks again. Kept in an owner-only JSON file in the daemon's
state folder for this workspace (`mcp-approvals.json`), written atomically, like the skills
trust; a missing or unreadable file approves nothing.
"""

import json
import time
from pathlib import Path
from typing import cast

from tether.daemon.private_json import write_private_json


class ServerApprovals:
    """The approved workspace servers, by name and fingerprint (`path` None: in memory)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._approved = self._read()

    def _read(self) -> dict[str, dict[str, object]]:
        if self.path is None:
            return {}
        try:
            record: object = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(record, dict):
            return {}
        servers = cast("dict[str, object]", record).get("servers")
        if not isinstance(servers, dict):
            return {}
        return {
            name: cast("dict[str, object]", entry)
            for name, entry in cast("dict[str, object]", servers).items()
            if isinstance(entry, dict)
        }

    def approved(self, name: str, fingerprint: str) -> bool:
        entry = self._approved.get(name)
        return entry is not None and entry.get("fingerprint") == fingerprint

    def grant(self, name: str, fingerprint: str, by: str = "") -> None:
        """Approve the server as defined now, and remember it. Blocking (a small write); an
        OSError leaves it approved for this daemon's life only and propagates."""
        self._approved[name] = {"fingerprint": fingerprint, "by": by, "at": time.time()}
        if self.path is None:
            return
        write_private_json(self.path, {"servers": self._approved})
