"""Session events: every change to a session is one event, numbered by `seq` within an `epoch`.

Rules every client can rely on:
- `seq` increases by exactly one per event within an epoch (no gaps, no repeats). A client
  that reads slower than a session streams may get consecutive `item_delta`s of one item
  merged into one notification that declares the seqs it covers (`firstSeq`..`seq`).
- The `epoch` is a random id that changes whenever continuity is lost (a daemon restart); a
  client holding a cursor from another epoch gets a snapshot instead of a replay.
- Completed items and state changes are persisted; the `EPHEMERAL_EVENTS` (`item_delta`,
  `model_retry`, `context_updated`) live only in a bounded in-memory ring, which is why a
  cursor that the ring no longer reaches also gets a snapshot.
- A client ignores event types, fields and enum values it does not know: a newer daemon may
  send them without changing the protocol version.

Timestamps (`*_at`) are seconds since the Unix epoch, as floats.
"""

from typing import Literal

from tether.protocol import enums
from tether.protocol.base import Wire
from tether.protocol.enums import TurnErrorCode
from tether.protocol.items import AnyItem, ImageRef

TurnEndStatus = enums.TurnEndStatus
TurnStatus = enums.TurnStatus
"""Also known from here, where the events that carry them are."""


class Usage(Wire, frozen=True, kw_only=True):
    """Tokens the model calls of a turn took, as the provider counted them (or estimated)."""

    input_tokens: int = 0
    output_tokens: int = 0


class TurnError(Wire, frozen=True, kw_only=True):
    """Why a turn failed, written for the person reading it: what happened and what to do."""

    code: TurnErrorCode
    """`model_unreachable` (no server answers at the base URL), `model_http_error` (it
    answered with an error status), `model_protocol_error` (its answer could not be read),
    `model_timeout` (it went silent), `model_error` (another model failure), `config_invalid`
    (the user's settings cannot be read), `compaction_failed` (the model's summary was
    unusable), `internal_error` (a bug in tether; the daemon log has it), `interrupted` (the
    daemon stopped while the turn ran)."""
    message: str


class Event(Wire, frozen=True, kw_only=True, tag_field="type"):
    """A change to a session, carried by a `session/event` notification; `type` tells which."""


class TurnEnvironment(Wire, frozen=True, kw_only=True):
    """The environment a turn's commands and hooks run in, in brief."""

    source: Literal["client", "daemon"] = "daemon"
    """`client`: the one the client sent with `turn/start` (its shell's); `daemon`: the
    daemon's own (the client sent none, as editors do)."""
    path: str = ""
    """Its PATH."""
    virtual_env: str = ""
    """Its VIRTUAL_ENV (empty: none)."""
    conda_prefix: str = ""
    """Its CONDA_PREFIX (empty: none)."""


class TurnStarted(Event, frozen=True, kw_only=True, tag="turn_started"):
    """A turn began (`turn/start` with no turn running, or `session/compact`). Its events
    may reach the client before the `turn/start` answer that names it."""

    turn_id: str
    started_at: float
    """Seconds since the Unix epoch (a float)."""
    environment: TurnEnvironment | None = None
    """The environment its commands and hooks run in (None: not recorded, as for a
    compaction)."""


class ItemStarted(Event, frozen=True, kw_only=True, tag="item_started"):
    """An item of the turn appeared. Streaming items (assistant text, reasoning, tool calls)
    then grow by `item_delta`s until their `item_completed`."""

    turn_id: str
    item: AnyItem


class ToolProgress(Wire, frozen=True, kw_only=True):
    """How far a running tool call has got, as the tool reports it (an MCP server's
    `notifications/progress`)."""

    progress: float
    """Grows with every report; a count of steps, bytes, … as the tool chose."""
    total: float | None = None
    """What `progress` reaches at the end, when the tool knows it."""
    message: str = ""


class ItemDelta(Event, frozen=True, kw_only=True, tag="item_delta"):
    """Text appended to a running item: to `text` of an `agent_message` or `reasoning`, to
    `output` of a `tool_call` (command output). Never persisted: a client that missed deltas
    gets the text so far in a snapshot, and `item_completed` has the whole of it."""

    turn_id: str
    item_id: str
    delta: str
    progress: ToolProgress | None = None
    """Set on a `tool_call`'s delta (its `delta` then empty) when the tool reported how far
    it has got; the latest one stands until the next, or until `item_completed`."""


class ItemCompleted(Event, frozen=True, kw_only=True, tag="item_completed"):
    """An item is finished. Its copy is authoritative: it replaces whatever the client built
    from `item_started` and the `item_delta`s (a tool call's status, output and diff are set
    here). Short items (a user message, a notice) start and complete at once."""

    turn_id: str
    item: AnyItem


class ItemUpdated(Event, frozen=True, kw_only=True, tag="item_updated"):
    """A started item changed while it is still in progress (a `task` call's subagent left
    the queue and started). Its copy replaces the item; it stays open until its
    `item_completed`. A client that ignores this event loses nothing `item_completed` does
    not carry."""

    turn_id: str
    item: AnyItem


class TurnCompleted(Event, frozen=True, kw_only=True, tag="turn_completed"):
    """The turn ended; the last event of every turn, after its `turn_summary` item."""

    turn_id: str
    status: TurnEndStatus
    """`completed` (the model answered without tools), `failed` (see `error`), `cancelled`
    (`turn/cancel`), `interrupted` (the daemon stopped while it ran: send `continue` to
    resume), `paused` (the step budget ran out: send `continue` to go on)."""
    ended_at: float
    """Seconds since the Unix epoch (a float)."""
    usage: Usage = Usage()
    error: TurnError | None = None
    """Set when the turn did not complete: why, and what to do."""


class SessionRenamed(Event, frozen=True, kw_only=True, tag="session_renamed"):
    """The session's title changed: the automatic one (the first line of its first message),
    or one a client gave it (`session/rename`)."""

    title: str
    by: str = ""
    """The client that renamed it; empty for the automatic title."""


PermissionMode = Literal["ask", "edits", "auto"]
ApprovalKind = Literal["read", "edit", "command", "tool"]
Decision = Literal["allow", "deny"]
DecisionScope = Literal["once", "always"]


class SessionConfigured(Event, frozen=True, kw_only=True, tag="session_configured"):
    """A setting of the session changed; a field that is null did not change."""

    permission_mode: PermissionMode | None = None
    model: str | None = None
    """The model chosen for the session's turns from now on (empty: the daemon's default)."""
    subagent_model: str | None = None
    """The model chosen for the session's subagents from now on (empty: the user's
    `subagent_model`, else the model the turn calls)."""


class ApprovalRequest(Wire, frozen=True, kw_only=True):
    """A tool call waiting for a person's answer, with everything needed to decide. The
    strings are relayed from the model: show control and invisible characters visibly."""

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
    subagent: str = ""
    """The description of the subagent that made the call (its `item_id` is nested under
    that subagent's `task` call); empty for the agent's own calls."""
    requested_at: float = 0.0
    """Seconds since the Unix epoch (a float)."""


class ApprovalRequested(Event, frozen=True, kw_only=True, tag="approval_requested"):
    """A tool call waits for a controller's `approval/respond`; it waits while no client is
    attached, and a cancelled turn resolves it as denied."""

    approval: ApprovalRequest


class ApprovalResolved(Event, frozen=True, kw_only=True, tag="approval_resolved"):
    """An approval was answered (the first answer wins) or denied by the daemon (the turn was
    cancelled, or the daemon stopped)."""

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
    images: list[ImageRef] = []
    """The images that go with it (see `UserMessage.images`)."""


class InputDropped(Event, frozen=True, kw_only=True, tag="input_dropped"):
    """Queued messages that the turn ended without (it was cancelled or failed)."""

    input_ids: list[str]
    reason: str


class ModelRetry(Event, frozen=True, kw_only=True, tag="model_retry"):
    """The model call failed in a way worth retrying; the turn waits `delaySeconds`, then calls
    again (a client shows the wait; `turn/cancel` ends it). Never persisted."""

    turn_id: str
    attempt: int
    """1-based: the retry about to be made."""
    max_attempts: int
    delay_seconds: float
    reason: str


class ContextMeter(Wire, frozen=True, kw_only=True):
    """How full the model's context is."""

    used: int = 0
    """Tokens the conversation takes (the provider's count when known, else an estimate)."""
    budget: int = 0
    """Tokens it may take before compaction (0: unknown)."""


class ContextUpdated(Event, frozen=True, kw_only=True, tag="context_updated"):
    """The context meter changed (after a model call or a compaction). Never persisted."""

    context: ContextMeter


class Diagnostic(Wire, frozen=True, kw_only=True):
    """One problem a language server reported."""

    path: str
    line: int
    """1-based."""
    column: int
    """1-based."""
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
    """One entry of the agent's todo list."""

    content: str
    status: Literal["pending", "in_progress", "completed"] = "pending"


class TodosUpdated(Event, frozen=True, kw_only=True, tag="todos_updated"):
    """The agent rewrote its todo list (`todo_write`); `todos` is the whole new list."""

    todos: list[TodoEntry]


AnyEvent = (  # clients skip a `type` not listed here
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
    | ItemUpdated
)

EPHEMERAL_EVENTS: tuple[type[Event], ...] = (ItemDelta, ModelRetry, ContextUpdated)
"""Events kept only in the in-memory ring, never persisted."""
