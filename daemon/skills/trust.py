"""Whether the user trusts a workspace's skills, remembered across daemon restarts.

A workspace's skills are instructions written by whoever can commit to the repository, so the
first time the agent would use one the user is asked, unless the user trusts the whole
workspace (`tether.daemon.workspace_trust`). A yes to that question is kept in its own record
(`skills-trust.json`, owner-only, in the daemon's state folder for this workspace): it trusts
the skills, not the workspace's programs.
"""

from pathlib import Path

from tether.daemon.workspace_trust import TrustRecord


class SkillsTrust:
    """The user's trust in one workspace's skills: its own yes, kept in `path` (None: in
    memory only), or the user's trust in the whole `workspace`."""

    def __init__(self, path: Path | None, workspace: TrustRecord | None = None) -> None:
        self.own = TrustRecord(path)
        self.workspace = workspace

    @property
    def trusted(self) -> bool:
        return self.own.trusted or (self.workspace is not None and self.workspace.trusted)

    def grant(self, by: str = "") -> None:
        """Trust the workspace's skills from now on, and remember it. Blocking (a small
        write); an OSError leaves them trusted for this daemon's life only and propagates."""
        self.own.grant(by)

    def revoke(self, by: str = "") -> None:
        """Withdraw the skills' own yes (blocking, as `grant`)."""
        if self.own.trusted:
            self.own.revoke(by)
