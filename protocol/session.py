"""Sessions as clients see them: summaries, cursors and snapshots."""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.events import (
    ApprovalRequest,
    ContextMeter,
    PermissionMode,
    TodoEntry,
    TurnError,
    TurnStatus,
    Usage,
)
from tether.protocol.items import AnyItem, ImageRef

SessionStatus = Literal["idle", "running"]
SessionState = Literal[
    "idle", "running", "awaiting_approval", "failed", "cancelled", "interrupted", "paused"
]
"""What a session is doing: `running` a turn, or running one that is `awaiting_approval`;
otherwise how its last turn ended — `idle` when it completed (or there is none yet), else its
status (`failed`, `cancelled`, `interrupted`, `paused`)."""
Role = Literal["controller", "observer"]


class ForkOrigin(Wire, frozen=True, kw_only=True):
    """The session and turn a fork was made from (`session/fork`)."""

    session_id: str
    turn_id: str = ""
    """The last turn the fork copied; empty when the source had no completed turn."""


class WorktreeInfo(Wire, frozen=True, kw_only=True):
    """The git worktree a session works in (`isolation: "worktree"`)."""

    root: str
    """Its folder, in tether's data folder: the session's tools and commands work here."""
    branch: str
    """The branch it is checked out on, `tether/<title>-<session id>`."""
    base: str
    """The commit it was made from: its changes are counted against it."""


class SessionInfo(Wire, frozen=True, kw_only=True):
    """A session's summary, as `session/list` shows it."""

    id: str
    title: str = ""
    created_at: float
    """Seconds since the Unix epoch (a float)."""
    updated_at: float
    """Seconds since the Unix epoch (a float): when a turn started or ended, or a setting or
    the title changed."""
    status: SessionStatus = "idle"
    """Whether a turn runs (`state` says more)."""
    turn_count: int = 0
    permission_mode: PermissionMode = "edits"
    model: str = ""
    """The model this session's turns call, chosen for it (`session/configure`, or `model` at
    `session/create` / `turn/start`); empty: the daemon's configured model."""
    state: SessionState = "idle"
    """What it is doing, finer than `status` (see `SessionState`)."""
    subagent_model: str = ""
    """The model this session's subagents call, chosen for it (`session/configure`); empty:
    the user's `subagent_model`, else the model its turns call."""
    clients: int = 0
    """Connections attached to the session now, controllers and observers (an attaching
    client counts itself in its snapshot); 0 for a session the daemon has not loaded."""
    forked_from: ForkOrigin | None = None
    """Where the session was forked from; null for a session that was not forked."""
    worktree: WorktreeInfo | None = None
    """The git worktree the session works in; null: it works in the workspace itself."""


class QueuedInput(Wire, frozen=True, kw_only=True):
    """A message waiting to join the running turn at its next step (see `input_queued`)."""

    input_id: str
    text: str
    by: str = ""
    context: str = ""
    """What joins the history with the message (see `UserMessage.context`)."""
    images: list[ImageRef] = []
    """The images that join with it (see `UserMessage.images`)."""


class Cursor(Wire, frozen=True, kw_only=True):
    """The last event a client has seen: the `epoch` and `seq` of a `session/event`.

    A seq is meaningful only within its epoch: a cursor whose epoch is not the session's
    current one, or that has no epoch, is answered with a snapshot. The one exception is
    `{epoch: null, seq: 0}`, "from the beginning", which is replayed when the daemon still
    holds every event of the session (else a snapshot too)."""

    epoch: str | None = None
    seq: int = 0


class TurnSnapshot(Wire, frozen=True, kw_only=True):
    """One turn as of the snapshot: its items in order, a running one's with the text
    streamed so far."""

    id: str
    status: TurnStatus
    started_at: float
    """Seconds since the Unix epoch (a float)."""
    ended_at: float | None = None
    """Seconds since the Unix epoch (a float); null while it runs."""
    items: list[AnyItem] = []
    usage: Usage = Usage()
    error: TurnError | None = None


class SessionSnapshot(Wire, frozen=True, kw_only=True):
    """The whole state of a session as of event `seq` in `epoch`.

    Items still in progress appear with the content streamed so far; the events after `seq`
    continue them.
    """

    session: SessionInfo
    epoch: str
    seq: int
    turns: list[TurnSnapshot] = []
    pending_approvals: list[ApprovalRequest] = []
    queued_inputs: list[QueuedInput] = []
    todos: list[TodoEntry] = []
    context: ContextMeter = ContextMeter()
