"""Session events: every change to a session is one event, numbered by `seq` within an `epoch`.

Rules every client can rely on:
- `seq` increases by exactly one per event within an epoch (no gaps, no repeats).
- The `epoch` is a random id that changes whenever continuity is lost (a daemon restart); a
  client holding a cursor from another epoch gets a snapshot instead of a replay.
- Completed items and state changes are persisted; `item_delta`s live only in a bounded
  in-memory ring, which is why a cursor that the ring no longer reaches also gets a snapshot.
"""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.items import AnyItem

TurnStatus = Literal["running", "completed", "failed", "cancelled", "interrupted", "paused"]


class Usage(Wire, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0


class TurnError(Wire, frozen=True, kw_only=True):
    """Why a turn failed, written for the person reading it: what happened and what to do."""

    code: str
    message: str


class Event(Wire, frozen=True, kw_only=True, tag_field="type"):
    pass


class TurnStarted(Event, frozen=True, kw_only=True, tag="turn_started"):
    turn_id: str
    started_at: float


class ItemStarted(Event, frozen=True, kw_only=True, tag="item_started"):
    turn_id: str
    item: AnyItem


class ItemDelta(Event, frozen=True, kw_only=True, tag="item_delta"):
    """Text appended to a running item: assistant text, reasoning, or command output."""

    turn_id: str
    item_id: str
    delta: str


class ItemCompleted(Event, frozen=True, kw_only=True, tag="item_completed"):
    turn_id: str
    item: AnyItem


class TurnCompleted(Event, frozen=True, kw_only=True, tag="turn_completed"):
    turn_id: str
    status: TurnStatus
    ended_at: float
    usage: Usage = Usage()
    error: TurnError | None = None


class SessionRenamed(Event, frozen=True, kw_only=True, tag="session_renamed"):
    title: str


PermissionMode = Literal["ask", "edits", "auto"]
ApprovalKind = Literal["read", "edit", "command", "tool"]
Decision = Literal["allow", "deny"]
DecisionScope = Literal["once", "always"]


class SessionConfigured(Event, frozen=True, kw_only=True, tag="session_configured"):
    """A setting of the session changed; a field that is null did not change."""

    permission_mode: PermissionMode | None = None
    model: str | None = None
    """The model chosen for the session's turns from now on (empty: the daemon's default)."""


class ApprovalRequest(Wire, frozen=True, kw_only=True):
    """A tool call waiting for a person's answer, with everything needed to decide."""

    id: str
    turn_id: str
    item_id: str
    """The tool call item it gates."""
    tool: str
    arguments: str
    kind: ApprovalKind
    reason: str
    """Why it asks, in words (the mode, a rule, a sensitive path, a shell operator)."""
    command: str = ""
    path: str = ""
    preview: str = ""
    """A unified diff for edits."""
    always_rule: str = ""
    """What "always allow" would allow from now on in this session."""
    requested_at: float = 0.0


class ApprovalRequested(Event, frozen=True, kw_only=True, tag="approval_requested"):
    approval: ApprovalRequest


class ApprovalResolved(Event, frozen=True, kw_only=True, tag="approval_resolved"):
    approval_id: str
    turn_id: str
    decision: Decision
    scope: DecisionScope = "once"
    by: str
    """Who answered: a client's name, or `daemon` when the turn was cancelled."""
    message: str = ""


class InputQueued(Event, frozen=True, kw_only=True, tag="input_queued"):
    """A message sent while a turn runs; it joins at the next step as a user message item
    with the same id."""

    input_id: str
    text: str
    by: str = ""
    context: str = ""
    """What goes with the message for the model: editor state and mentioned files (the
    repository's instructions are added when it joins, if they changed since last sent)."""


class InputDropped(Event, frozen=True, kw_only=True, tag="input_dropped"):
    """Queued messages that the turn ended without (it was cancelled or failed)."""

    input_ids: list[str]
    reason: str


class ModelRetry(Event, frozen=True, kw_only=True, tag="model_retry"):
    """The model call failed in a way worth retrying; the turn waits, then calls again."""

    turn_id: str
    attempt: int
    max_attempts: int
    delay_seconds: float
    reason: str


class ContextMeter(Wire, frozen=True, kw_only=True):
    used: int = 0
    """Tokens the conversation takes (the provider's count when known, else an estimate)."""
    budget: int = 0
    """Tokens it may take before compaction (0: unknown)."""


class ContextUpdated(Event, frozen=True, kw_only=True, tag="context_updated"):
    context: ContextMeter


class Diagnostic(Wire, frozen=True, kw_only=True):
    path: str
    line: int
    column: int
    severity: Literal["error", "warning", "information", "hint"] = "error"
    message: str
    source: str = ""
    code: str = ""


class DiagnosticsReported(Event, frozen=True, kw_only=True, tag="diagnostics_reported"):
    """What language servers said about the files a step changed."""

    turn_id: str
    item_id: str
    """The tool call whose result carries the report."""
    diagnostics: list[Diagnostic]


class TodoEntry(Wire, frozen=True, kw_only=True):
    content: str
    status: Literal["pending", "in_progress", "completed"] = "pending"


class TodosUpdated(Event, frozen=True, kw_only=True, tag="todos_updated"):
    todos: list[TodoEntry]


AnyEvent = (
    TurnStarted
    | ItemStarted
    | ItemDelta
    | ItemCompleted
    | TurnCompleted
    | SessionRenamed
    | SessionConfigured
    | ApprovalRequested
    | ApprovalResolved
    | InputQueued
    | InputDropped
    | ModelRetry
    | TodosUpdated
    | ContextUpdated
    | DiagnosticsReported
)

EPHEMERAL_EVENTS: tuple[type[Event], ...] = (ItemDelta, ModelRetry, ContextUpdated)
"""Events kept only in the in-memory ring, never persisted."""
