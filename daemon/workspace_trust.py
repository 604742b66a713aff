"""The user's trust in a workspace, remembered across daemon restarts.

A cloned repository can hold programs that tools pick up on their own: a language server runs
the workspace's `node_modules/typescript` or asks its `.venv/bin/python` for search paths. Until
the user trusts the workspace (`tether trust`, the protocol's `workspace/trust`), tether runs
nothing that lives inside it: language servers run in a restricted form, workspace MCP servers
wait for their own approval, workspace skills ask first. Trusting the workspace also trusts its
skills; it does not approve its MCP servers, which each keep their own approval (of their
definition and the code they name).

Kept, like those, in a small owner-only JSON file in the daemon's state folder for this
workspace, written atomically, never in the workspace: a repository cannot trust itself. The
file says who answered and when; a missing or unreadable file means "not trusted", so a damaged
record costs one more question, never a silent yes.
"""

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from tether.daemon.private_json import write_private_json


class TrustRecord:
    """One yes (or a withdrawn one) the user gave about a workspace, kept in `path` (None: in
    memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.trusted = False
        self.by = ""
        self.at: float | None = None
        self._read()

    def _read(self) -> None:
        if self.path is None:
            return
        try:
            record: object = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return
        if not isinstance(record, dict):
            return
        fields = cast("dict[str, object]", record)
        self.trusted = fields.get("trusted") is True
        by, at = fields.get("by"), fields.get("at")
        self.by = by if isinstance(by, str) else ""
        self.at = float(at) if isinstance(at, int | float) else None

    def grant(self, by: str = "") -> None:
        """Trust from now on, and remember it. Blocking (a small write); an OSError leaves it
        trusted for this daemon's life only and propagates."""
        self._set(True, by)

    def revoke(self, by: str = "") -> None:
        """Trust no more, and remember it. Blocking; an OSError leaves it untrusted for this
        daemon's life only and propagates."""
        self._set(False, by)

    def _set(self, trusted: bool, by: str) -> None:
        self.trusted, self.by, self.at = trusted, by, time.time()
        if self.path is not None:
            write_private_json(self.path, {"trusted": trusted, "by": by, "at": self.at})


class WorkspaceTrust:
    """The user's trust in one workspace (`record`) and what a change of it touches:
    `also_revoke` withdraws narrower yeses with it (the skills' own), `on_change` tells the
    parts that act on it (the language servers)."""

    def __init__(
        self,
        record: TrustRecord,
        *,
        also_revoke: Sequence[Callable[[str], None]] = (),
        on_change: Sequence[Callable[[], None]] = (),
    ) -> None:
        self.record = record
        self.also_revoke = list(also_revoke)
        self.on_change = list(on_change)

    @property
    def trusted(self) -> bool:
        return self.record.trusted

    def write(self, trusted: bool, by: str) -> None:
        """Trust the workspace, or trust it no more (and withdraw the narrower yeses), and
        remember it. Blocking: run it in a thread, then `changed` in the event loop. An
        OSError propagates, the answer kept for this daemon's life."""
        if trusted:
            self.record.grant(by)
            return
        self.record.revoke(by)
        for revoke in self.also_revoke:
            revoke(by)

    def changed(self) -> None:
        for notify in self.on_change:
            notify()
