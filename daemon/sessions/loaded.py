"""A loaded session: what the daemon keeps in memory beside a session's state while it is
loaded (its history, approvals, the edit guard's read versions, its context budget, and the
repository instructions last sent), none of which is persisted.

The repository's instructions go with the first message that joins the history after they
changed; they count as sent only then, so a message dropped from the queue takes nothing with
it. When a session is loaded again, the instructions last sent are those of its newest user
message that carried any.

The files in play (for the skills catalog's order) are those the session's messages mentioned
or had open in the editor, and those its agent read or wrote since the session was loaded.
"""

from collections.abc import Iterable
from pathlib import Path

from tether.daemon.context.history import History
from tether.daemon.context.instructions import CLOSE_TAG, OPEN_TAG
from tether.daemon.context.prompt import with_skills
from tether.daemon.sessions.approvals import ApprovalBroker
from tether.daemon.sessions.context import SessionContext
from tether.daemon.sessions.session import Session
from tether.daemon.tools.base import ReadVersions
from tether.daemon.workspace import display_path
from tether.protocol.items import AnyItem, UserMessage


class LoadedSession:
    """What the daemon keeps beside a loaded session's state."""

    def __init__(self, session: Session, history: History, context: SessionContext) -> None:
        self.session = session
        self.history = history
        self.broker = ApprovalBroker(session)
        self.versions = ReadVersions()
        self.context = context
        self.instructions = _last_sent_instructions(session.items())
        """The repository instructions last sent to the model in this session."""
        self.read_instructions: str | None = None
        """The repository instructions as last read, for the next message that joins the
        history (None: not read since the session was loaded)."""
        self.base_prompt = history.system_prompt
        """The system prompt without the skills catalog."""
        self.mentioned: set[str] = set()
        self.told_untrusted = False
        """The session was told its workspace's language servers run restricted."""
        """Workspace-relative files the session's messages mentioned or had open."""

    def files_in_play(self, workspace: Path) -> list[str]:
        """The workspace-relative files in play: mentioned, open in the editor, read or
        written by the agent."""
        touched = {display_path(workspace, path) for path in self.versions.paths()}
        return sorted(self.mentioned | touched)

    def use_catalog(self, catalog: str) -> None:
        """Put the skills `catalog` at the end of the system prompt (none: "")."""
        self.history.set_system_prompt(with_skills(self.base_prompt, catalog))

    def with_instructions(self, context: str) -> str:
        """The context of a message that joins the history now: the instructions as last read
        in front of `context` when they differ from those last sent, which they then are."""
        instructions = self.read_instructions
        if instructions is None or instructions == self.instructions:
            return context
        self.instructions = instructions
        return "\n\n".join(part for part in (instructions, context) if part)


def _last_sent_instructions(items: Iterable[AnyItem]) -> str:
    """The instructions the newest user message that carried any was sent with."""
    for item in reversed(list(items)):
        if isinstance(item, UserMessage) and item.context.startswith(OPEN_TAG):
            end = item.context.find(CLOSE_TAG)
            if end >= 0:
                return item.context[: end + len(CLOSE_TAG)]
    return ""
