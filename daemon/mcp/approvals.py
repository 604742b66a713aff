"""Which of a workspace's MCP servers the user approved, remembered across daemon restarts.

A workspace server runs a program the repository names, so it starts only once the user has
approved it. The approval is for the server's whole definition (its fingerprint) and for the
content of the workspace files it names (`named_files`): a changed command, argument or
variable, or a changed `server.js`, asks again, and the pool says which. Kept in an
owner-only JSON file in the daemon's state folder for this workspace (`mcp-approvals.json`),
written atomically, like the workspace trust; a missing or unreadable file approves nothing.
"""

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from tether.daemon.mcp.named_files import what_changed
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

    def approved(self, name: str, fingerprint: str, files: Mapping[str, str] | None = None) -> bool:
        return self.needs_approval(name, fingerprint, files or {}) == ""

    def needs_approval(self, name: str, fingerprint: str, files: Mapping[str, str]) -> str:
        """Why the server as defined now, naming `files` (path → sha256), needs the user's
        approval: `not approved yet`, `its definition changed`, `server.js changed`; "" when
        it is approved."""
        entry = self._approved.get(name)
        if entry is None:
            return "not approved yet"
        if entry.get("fingerprint") != fingerprint:
            return "its definition changed since it was approved"
        recorded = entry.get("files", {})
        approved_files = (
            {k: v for k, v in cast("dict[str, object]", recorded).items() if isinstance(v, str)}
            if isinstance(recorded, dict)
            else {}
        )
        changed = what_changed(approved_files, files)
        return f"{changed} since it was approved" if changed else ""

    def grant(
        self, name: str, fingerprint: str, by: str = "", files: Mapping[str, str] | None = None
    ) -> None:
        """Approve the server as defined now, and the named files as they are now, and
        remember it. Blocking (a small write); an OSError leaves it approved for this daemon's
        life only and propagates."""
        self._approved[name] = {
            "fingerprint": fingerprint,
            "files": dict(files or {}),
            "by": by,
            "at": time.time(),
        }
        if self.path is None:
            return
        write_private_json(self.path, {"servers": self._approved})
