"""The method table: one `Method` descriptor per JSON-RPC method, naming its Params and Result.

The descriptors (`SESSION_ATTACH`, …) type the Python client's calls and the daemon's handlers;
`METHODS`, derived from them, drives the dispatcher and the committed JSON Schema
(`packaging/schema/tether-protocol.schema.json`), so none of them can drift apart. Each method
lists the error codes it can return beyond the `GENERIC_ERRORS` (`errors=`), which a test
holds to what its handler raises.
"""

from typing import Generic, Literal, Protocol, TypeVar

import msgspec

from tether.protocol.base import Wire
from tether.protocol.enums import DaemonEventKind, HookEvent, McpServerState, SkillOrigin
from tether.protocol.errors import ErrorCode
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    Decision,
    DecisionScope,
    PermissionMode,
    TurnEnvironment,
)
from tether.protocol.session import Cursor, Role, SessionInfo, SessionSnapshot, WorktreeInfo


class Empty(Wire, frozen=True, kw_only=True):
    """Params or result with no fields."""


# --- initialize -------------------------------------------------------------------------------


class ProviderEnvironment(Wire, frozen=True, kw_only=True):
    """The provider variables of the client's own environment, sent so that the user's shell
    decides the model server rather than the one that started the daemon. An empty field is
    an unset variable. The daemon keeps them in memory for the connection only: never
    persisted, logged or sent to anyone (the socket is loopback and token-authenticated, and
    whoever holds the token can read the user's config file anyway)."""

    provider: str = ""
    """TETHER_PROVIDER."""
    base_url: str = ""
    """TETHER_BASE_URL."""
    model: str = ""
    """TETHER_MODEL."""
    api_key: str = ""
    """TETHER_API_KEY."""
    openai_api_key: str = ""
    """OPENAI_API_KEY."""
    anthropic_api_key: str = ""
    """ANTHROPIC_API_KEY."""


class ClientCapabilities(Wire, frozen=True, kw_only=True):
    """What the client asks of the daemon for this connection. A field the client leaves out
    keeps its default (what a client that sends no capabilities gets), and a field this daemon
    does not know (from a newer client) is ignored."""

    item_deltas: bool = True
    """Send `item_delta` events (streamed text, reasoning, command output). False, for a
    client that renders only whole items: the daemon sends it no `item_delta`, live or
    replayed, and everything else as usual (`item_started`, `item_completed` with the whole
    text, …). The seqs of the skipped deltas are simply absent from what it receives: its
    seqs increase but jump, a jump is not a gap, and its cursor (the last seq it received)
    resumes it exactly. "Gap-free" is a promise to clients that take every event; a client
    that falls behind is told so with `session/resync` whatever it takes."""


class CancelRequestParams(Wire, frozen=True, kw_only=True):
    """`$/cancelRequest`, a client notification (no `id`, never answered), as in LSP: cancel
    the request `id` this connection sent, if it still runs. That request is then answered
    with REQUEST_CANCELLED, or with its result if it had already done its work (an undo
    that has begun restoring files finishes). An id that is unknown or already answered is
    ignored, as is `$/cancelRequest` before `initialize`."""

    id: str | int


CANCEL_REQUEST = "$/cancelRequest"

CLIENT_NOTIFICATIONS: dict[str, type[Wire]] = {CANCEL_REQUEST: CancelRequestParams}
"""The notifications a client may send the daemon, by method."""


class InitializeParams(Wire, frozen=True, kw_only=True):
    client_name: str
    client_version: str = ""
    protocol_version: int = 1
    provider_env: ProviderEnvironment | None = None
    """The client's provider variables; they replace the daemon's own for this connection's
    turns, compactions and model listings (precedence: a session's chosen model, then these,
    then the user's config file, then the defaults). None: the daemon's environment applies."""
    capabilities: ClientCapabilities = msgspec.field(default_factory=ClientCapabilities)


class DaemonLimits(Wire, frozen=True, kw_only=True):
    """The daemon's limits for this connection."""

    max_message_bytes: int
    """The largest frame the daemon reads; a larger one closes the connection with 1009."""
    replay_buffer_bytes: int
    """The recent events a session keeps for `session/attach` with a cursor; a cursor older
    than they reach back is answered with a snapshot."""
    client_queue_bytes: int
    """What the daemon holds for this client before it is told to resync (events) or
    disconnected with 1008 (responses)."""
    max_requests_in_flight: int
    """Requests of this connection that run at once; the daemon reads no more frames from the
    client until one of them is answered."""
    ping_interval: float
    """Seconds between the daemon's websocket pings."""
    ping_timeout: float
    """Seconds a pong may take before the daemon closes the connection with 1011."""


class DaemonCapabilities(Wire, frozen=True, kw_only=True):
    """What the daemon serves. Empty in an answer from a daemon older than capabilities."""

    methods: list[str] = []
    """Every request method it answers."""
    notifications: list[str] = []
    """The notifications it sends (`session/event`, …)."""
    client_notifications: list[str] = []
    """The notifications it reads from clients (`$/cancelRequest`)."""
    limits: DaemonLimits | None = None


class InitializeResult(Wire, frozen=True, kw_only=True):
    protocol_version: int
    daemon_version: str
    workspace: str
    pid: int
    capabilities: DaemonCapabilities = msgspec.field(default_factory=DaemonCapabilities)


# --- daemon -----------------------------------------------------------------------------------


class SessionModel(Wire, frozen=True, kw_only=True):
    """A loaded session that chose a model of its own."""

    session_id: str
    model: str
    running: bool = False


class DaemonStatusResult(Wire, frozen=True, kw_only=True):
    """What the daemon is and does now, and the settings in effect for the asking client."""

    pid: int
    workspace: str
    daemon_version: str
    protocol_version: int
    started_at: float
    """Seconds since the Unix epoch (a float)."""
    clients: int
    """Open connections, the asking one included."""
    sessions_loaded: int
    running_turns: int
    idle_timeout: float
    """Seconds the daemon waits with no client and no running work before it exits (0:
    never)."""
    # The settings in effect for the asking client (its provider variables, the config file
    # as it is now), and where the daemon keeps things.
    provider: str = ""
    model: str = ""
    model_from: str = ""
    """Where `model` comes from: `client` (the asking client's TETHER_MODEL), `daemon` (the
    daemon's own TETHER_MODEL, for a client that sent no variables), `file`, `default`."""
    base_url: str = ""
    base_url_from: str = ""
    """Where `base_url` comes from (as `model_from`)."""
    config_file: str = ""
    config_error: str = ""
    """Why the config file cannot be used now (turns fail until it is fixed); empty: it can.
    The other settings fields then show what the daemon started with."""
    restart_needed: list[str] = []
    """Settings changed in the config file (or environment) that the daemon reads only when
    it starts (`permissions.mode`, `idle_timeout`, `lsp`, `log_level`); they apply after a
    restart."""
    log_file: str = ""
    uptime_seconds: float = 0.0
    session_models: list[SessionModel] = []
    """Loaded sessions that chose a model of their own."""
    # The command sandbox (docs/sandbox.md), as the user's settings have it now.
    sandbox: str = "off"
    """`bwrap`: commands run under bubblewrap; `off`: unconfined."""
    sandbox_network: bool = False
    """Sandboxed commands may use the network."""
    sandbox_problem: str = ""
    """Why sandboxed commands cannot run now (they fail; they never run unconfined); empty:
    they can, or the sandbox is off."""
    workspace_trusted: bool = False
    """The user trusts the workspace (`workspace/trust`): its language servers may run its own
    TypeScript and Python environment. Untrusted, they run restricted."""
    last_turn_environment: TurnEnvironment | None = None
    """The environment of the turn started last since the daemon started (None: none)."""


class WorkspaceTrustParams(Wire, frozen=True, kw_only=True):
    """Ask whether the user trusts the workspace, or set it."""

    trusted: bool | None = None
    """True: trust it (its language servers may run its own TypeScript and Python environment,
    its skills are used without asking); false: trust it no more; null: only ask. Remembered
    on the user's side, never in the workspace."""


class WorkspaceTrustResult(Wire, frozen=True, kw_only=True):
    """The user's trust in the workspace, as it is after the call."""

    workspace: str
    trusted: bool
    by: str = ""
    """Who last set it (a client's name), empty if never."""
    at: float | None = None
    """When it was last set (seconds since the Unix epoch), null if never."""


# --- sessions ---------------------------------------------------------------------------------


class SessionCreateParams(Wire, frozen=True, kw_only=True):
    """A new, empty session; it is not attached (send `session/attach`)."""

    title: str = ""
    permission_mode: PermissionMode | None = None
    """Defaults to the user's configured mode (`edits` unless configured)."""
    model: str | None = None
    """The model the session's turns call (default: the daemon's configured model)."""
    isolation: Literal["none", "worktree"] = "none"
    """`worktree`: the session works in a git worktree of its own, on a new branch, so that
    its edits and commands leave the workspace's checkout alone until `session/merge`.
    WORKTREE_FAILED when the workspace is not in a git repository (or git refuses)."""
    base_ref: str = ""
    """With `isolation: "worktree"`: the commit, branch or tag the worktree starts from
    (default: the workspace's `HEAD`)."""


class SessionMcpServer(Wire, frozen=True, kw_only=True):
    """An MCP server a client gives one session: a program to run (`command`, `args`, `env`)
    or a streamable-HTTP endpoint (`url`, `headers`)."""

    name: str
    """Letters, digits, `_` and `-`, at most 32: its tools are `mcp__NAME__TOOL`."""
    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    """Set for the server on top of the daemon's environment (without its secret-looking
    variables, as for commands)."""
    url: str = ""
    headers: dict[str, str] = {}


class SessionConfigureParams(Wire, frozen=True, kw_only=True):
    """Change a session's settings from its next model call on; a null field is left as is."""

    session_id: str
    permission_mode: PermissionMode | None = None
    model: str | None = None
    """A model id (see `models/list`); empty: back to the daemon's configured model."""
    subagent_model: str | None = None
    """The model the session's subagents (the `task` tool) call; empty: back to the user's
    `subagent_model`, else the model the turn calls."""
    mcp_servers: list[SessionMcpServer] | None = None
    """MCP servers for this session's turns beside the configured ones, replacing any given
    before (empty: none). The client's user chose them, so they run without the approval a
    workspace's servers need; they are the connection's (which must be attached: else
    NOT_ATTACHED): they stop when it detaches from the session or closes. A name the user's
    or workspace's servers use is left out (reported at the next turn)."""


class SessionConfigureResult(Wire, frozen=True, kw_only=True):
    """The session with its settings as they are now."""

    session: SessionInfo


class SessionCreateResult(Wire, frozen=True, kw_only=True):
    """The session created."""

    session: SessionInfo


class SessionListResult(Wire, frozen=True, kw_only=True):
    """Every session of the workspace, newest first."""

    sessions: list[SessionInfo]


class SessionRef(Wire, frozen=True, kw_only=True):
    """Names one session of the workspace."""

    session_id: str


class SessionReadResult(Wire, frozen=True, kw_only=True):
    """The session's whole state, without subscribing to its events."""

    snapshot: SessionSnapshot


class SessionAttachParams(Wire, frozen=True, kw_only=True):
    """Attach to a session: catch up from `after`, then receive live `session/event`s.

    With `after`, the events after that cursor are replayed as `session/event` notifications
    (exactly once each, in order) when the cursor is in the session's current epoch and the
    daemon still has them (see `Cursor`); otherwise, and without `after`, the result carries
    a snapshot and live events continue from its `seq`.

    Attaching again on a connection already attached to the session first detaches it (no
    event comes twice); the new `role` and cursor apply.
    """

    session_id: str
    after: Cursor | None = None
    """The last event the client holds; none: start from a snapshot."""
    role: Role = "controller"
    """`controller` may prompt, approve, cancel, configure, compact, undo and delete;
    `observer` only watches."""


class SessionAttachResult(Wire, frozen=True, kw_only=True):
    """How the client catches up: `mode` `replay` (the events after its cursor follow this
    answer as `session/event`s, before any live one) or `snapshot` (`snapshot` holds the whole
    state; live events follow). `snapshot` is present exactly when `mode` is `snapshot`."""

    epoch: str
    """The session's current epoch: cursors the client keeps from now on carry it."""
    mode: Literal["replay", "snapshot"]
    from_seq: int
    """Live (or replayed) events start after this seq: the first has `seq` `fromSeq + 1`."""
    snapshot: SessionSnapshot | None = None
    """Present exactly when `mode` is `snapshot`."""


# --- turns ------------------------------------------------------------------------------------


class Position(Wire, frozen=True, kw_only=True):
    """A place in a file."""

    line: int
    """1-based."""
    column: int = 1
    """1-based."""


class EditorContext(Wire, frozen=True, kw_only=True):
    """What the client's editor shows, attached to the message."""

    open_file: str | None = None
    cursor: Position | None = None
    selection: str | None = None
    """Capped at 6,000 characters."""
    open_files: list[str] = []
    """The other files open in the editor, by path: named to the model, not attached (the
    first 20)."""


class Attachment(Wire, frozen=True, kw_only=True):
    """Text the client attaches to a message itself (what was piped into `tether run`)."""

    name: str
    """What the text is, as the model sees it named (`stdin`)."""
    text: str
    """Middle-truncated within the same 40,000 characters as the mentioned files."""


# --- images in turn/start --------------------------------------------------------------------


class ImageInput(Wire, frozen=True, kw_only=True):
    """An image the client sends with a message: its bytes travel in the request (base64 in
    JSON), since the daemon may run on another machine than the file. At most
    `MAX_IMAGE_BYTES` (10 MiB) each and 11 MiB for all of a message's images
    (`tether.protocol.images`); the format is recognised by its magic bytes, and the daemon
    downscales an image over the model's limits."""

    name: str
    """The file name, as the model and clients are told."""
    data: bytes
    """The image file's bytes (PNG, JPEG, GIF or WebP): a base64 string on the wire."""
    mime_type: str = ""
    """What the client believes the image is; the daemon goes by the bytes."""


class TurnStartParams(Wire, frozen=True, kw_only=True):
    """Start a turn, or, while one runs, queue the text to join it at its next step."""

    session_id: str
    text: str
    editor: EditorContext | None = None
    mentions: list[str] = []
    """Files or folders to attach (files middle-truncated within 40,000 characters in all,
    folders as a listing of their first 100 entries)."""
    attachments: list[Attachment] = []
    """Texts to attach, sharing the mentioned files' 40,000 characters."""
    permission_mode: PermissionMode | None = None
    """Switch the session's permission mode from now on (a user's choice, as a CLI flag)."""
    model: str | None = None
    """Switch the session's model from now on (as `session/configure` does)."""
    images: list[ImageInput] = []
    """Images to send with the message (a mentioned image file is sent as one too). A model
    that takes no images gets none: the request fails with `IMAGES_UNSUPPORTED` before any
    model call; an image that is not one, or too large, fails with `INVALID_PARAMS`."""
    max_input_tokens: int | None = None
    """The tokens the message (`text`) may take, as estimated from its length; a longer one
    is refused with `INVALID_PARAMS`, saying its size, before anything is sent. None: half of
    what the model's context window leaves for the prompt. Never more than that whole."""
    env: dict[str, str] | None = None
    """The client's environment (its shell's variables): a turn this starts runs its commands
    and hooks in it, instead of in the environment of whichever shell started the daemon.
    Variables whose names look secret are dropped on receipt (the client should not send
    them). None: the daemon's own environment. A message queued for a running turn joins it
    in that turn's environment."""


class TurnStartResult(Wire, frozen=True, kw_only=True):
    """The turn the text went to. Its events (from `turn_started` on) may arrive before this
    answer: a client keeps them until it knows the turn id."""

    turn_id: str
    queued: bool = False
    """True when a turn was already running and the text was queued for it."""
    input_id: str = ""
    """The id of the `user_message` item the text becomes (of the `input_queued` event when
    queued)."""
    problems: list[str] = []
    """Mentions (or the open file) that could not be attached, one line each saying why (the
    message was sent without them), and mentioned files or attached texts that were cut to
    fit, one line each saying how much was left out."""


class SessionCompactResult(Wire, frozen=True, kw_only=True):
    """What `session/compact` did. When the conversation could not be made smaller (too
    short to summarise, or the summary would not be shorter than what it replaces) nothing
    changed: `compacted` is false, `reason` says why and both token counts are equal. A
    failed summary is an error instead (`COMPACTION_FAILED`, or `MODEL_UNAVAILABLE`), and a
    cancelled one returns `compacted: false` with the reason "cancelled"."""

    tokens_before: int
    tokens_after: int
    compacted: bool = True
    reason: str = ""


class LspServerStatus(Wire, frozen=True, kw_only=True):
    """One language server the daemon runs (or ran) for a language and project root."""

    name: str
    root: str
    state: Literal["starting", "running", "crashed", "restarting", "stopped"]
    pid: int | None = None
    restarts: int = 0
    last_error: str = ""
    restricted: bool = False
    """It runs in its restricted form, none of the workspace's programs (the workspace is not
    trusted): typescript-language-server on your own TypeScript, a Python type checker on the
    daemon's interpreter instead of the workspace's `.venv`."""


class LspStatusResult(Wire, frozen=True, kw_only=True):
    """The language servers, whatever their state."""

    servers: list[LspServerStatus]


class DaemonEventParams(Wire, frozen=True, kw_only=True):
    """Something about the daemon itself every client should know, sent to every
    connection (a language server crashed and is being restarted, …)."""

    kind: DaemonEventKind
    """`lsp/crashed` (a language server died; it is restarted), `lsp/restarted` (it is back),
    `store/write_failed` (the daemon could not save something to its database; it goes on,
    and the message says what was lost), `mcp/crashed` (an MCP server died, could not
    start, or its HTTP connection or session was lost; it is restarted or reconnected after
    a backoff), `mcp/restarted` (a stdio server is back), `mcp/recovered` (an HTTP server is
    reachable again, on a new session), `mcp/failed` (it kept failing; the next turn tries
    again)."""
    message: str


class ApprovalRespondParams(Wire, frozen=True, kw_only=True):
    """A controller's answer to a pending approval (`approval_requested`)."""

    session_id: str
    approval_id: str
    decision: Decision
    scope: DecisionScope = "once"
    """`always` also adds a session rule (see the request's `alwaysRule`)."""
    message: str = ""
    """Told to the model with a denial."""


class ModelInfo(Wire, frozen=True, kw_only=True):
    """One model the provider serves."""

    id: str
    """What `model` takes in `session/configure`, `session/create` and `turn/start`."""
    images: bool = False
    """Whether tether sends this model images (the user's `[models]` setting, else what
    tether knows of the provider and model; see docs/images.md)."""


class ModelsListResult(Wire, frozen=True, kw_only=True):
    """The models the configured provider serves, asked of it now."""

    models: list[ModelInfo]
    current: str
    """The model turns call unless a session chose its own."""
    provider: str


class SessionUndoParams(Wire, frozen=True, kw_only=True):
    """Undo a turn's file changes."""

    session_id: str
    turn_id: str | None = None
    """Default: the session's last turn that changed files."""
    force: bool = False
    """Also restore files that changed since the turn ended."""


class SessionUndoResult(Wire, frozen=True, kw_only=True):
    """What was restored (paths relative to the workspace)."""

    turn_id: str
    applied: bool
    """False when files changed since the turn and `force` was not given: nothing was done."""
    restored: list[str] = []
    removed: list[str] = []
    conflicts: list[str] = []
    """Files changed since the turn ended (restored only with `force`)."""
    note: str = ""


class ProcessInfo(Wire, frozen=True, kw_only=True):
    """A background process a command started (`run_command` in the background)."""

    id: str
    command: str
    cwd: str
    pid: int
    session_id: str = ""
    started_at: float
    """Seconds since the Unix epoch (a float)."""
    status: Literal["running", "exited", "killed"] = "running"
    exit_code: int | None = None


class ProcessListResult(Wire, frozen=True, kw_only=True):
    """The background processes the daemon owns, running or ended."""

    processes: list[ProcessInfo]


class ProcessKillParams(Wire, frozen=True, kw_only=True):
    """Names the background process to stop (SIGTERM to its group, then SIGKILL)."""

    process_id: str


class ProcessOutputParams(Wire, frozen=True, kw_only=True):
    """Names the background process whose output to read."""

    process_id: str
    max_chars: int = 4000
    """How much of the end of its output to return (at most the 16,000 characters kept)."""


class ProcessOutputResult(Wire, frozen=True, kw_only=True):
    """The process and the end of its output."""

    process: ProcessInfo
    text: str
    """The end of what it printed (stdout and stderr as they came), read by the model or not."""
    truncated: bool = False
    """It printed more than `text` before it."""


class TurnCancelParams(Wire, frozen=True, kw_only=True):
    """Cancel the session's running turn: the model call stops, running commands are killed,
    pending approvals resolve as denied, finished edits stay. The turn ends `cancelled`."""

    session_id: str
    turn_id: str | None = None
    """Only this turn (NO_RUNNING_TURN when another one runs); none: whichever runs."""


class TurnCancelResult(Wire, frozen=True, kw_only=True):
    """The turn being cancelled; its `turn_completed` follows."""

    turn_id: str


# --- tools ------------------------------------------------------------------------------------


class ToolInfo(Wire, frozen=True, kw_only=True):
    """One tool the model can call."""

    name: str
    description: str
    read_only: bool
    """It changes nothing: such calls run concurrently and never need an edit approval."""
    input_schema: msgspec.Raw
    """The JSON Schema of the tool's arguments, as the model sees it."""


class ToolsListResult(Wire, frozen=True, kw_only=True):
    """The tools, in the order the model is shown them."""

    tools: list[ToolInfo]


# --- notifications (daemon -> client) ---------------------------------------------------------


class SessionEventParams(Wire, frozen=True, kw_only=True):
    """One event of a session the connection is attached to, live or replayed.

    Within an epoch `seq` goes up by exactly one per event, never skipping or repeating; a new
    epoch (the daemon restarted) starts a new count. `{epoch, seq}` of the last event handled
    is the cursor to re-attach with. A client skips an event whose `type` it does not know
    (still counting its seq).

    One notification may stand for several events: consecutive `item_delta`s of one item
    that waited for a client that fell behind are sent merged (see `firstSeq`). The stream
    stays gap-free when each notification is counted from its `firstSeq` (or `seq`) to its
    `seq`."""

    session_id: str
    epoch: str
    seq: int
    """The event's seq; for merged deltas, the seq of the last one."""
    event: AnyEvent
    first_seq: int | None = None
    """Set only on merged deltas: the seq of the first of the consecutive `item_delta`s of one
    item this one `item_delta` holds (their texts joined in order, the last `progress`). It
    stands for the events `firstSeq`..`seq`: it continues a cursor at `firstSeq - 1`, and
    the cursor after it is `seq`. The daemon merges a client's deltas only while they wait
    for it (it reads slower than the session streams) instead of telling it to resync;
    absent, the notification is one event (`firstSeq` = `seq`). Replays are never merged."""


class SessionResyncParams(Wire, frozen=True, kw_only=True):
    """The client fell behind and was unsubscribed: it gets no more of the session's events.
    It re-attaches (`session/attach` with `after` set to the last `{epoch, seq}` it handled)
    and gets the missed events replayed, or a snapshot."""

    session_id: str
    reason: str


class SessionDeleteParams(Wire, frozen=True, kw_only=True):
    """Delete a session."""

    session_id: str
    force: bool = False
    """Also when its worktree holds changes not merged (they are lost)."""


class SessionDeletedParams(Wire, frozen=True, kw_only=True):
    """The session was deleted (`session/delete`); the client is no longer attached to it and
    gets no more of its events."""

    session_id: str
    by: str = ""
    """The name of the client that deleted it."""


P = TypeVar("P", bound=Wire)
R = TypeVar("R", bound=Wire)


class Method(msgspec.Struct, Generic[P, R], frozen=True):
    """One JSON-RPC method: its name, the type of its params and the type of its result.

    Calls and handlers are typed by it: `Client.call(SESSION_READ, SessionRef(...))` returns a
    `SessionReadResult`, and the daemon's handler for `SESSION_READ` must take a `SessionRef`.
    """

    name: str
    params: type[P]
    result: type[R]
    doc: str
    needs_controller: bool = False
    errors: tuple[ErrorCode, ...] = ()
    """The codes it can return beyond the `GENERIC_ERRORS`."""


class MethodSpec(Protocol):
    """Any `Method`, seen through the table: what the dispatcher, the codec and the schema read.

    `Method` is invariant in its types (a method's params are exactly its params), so a table
    of different methods holds them as this read-only view."""

    @property
    def name(self) -> str: ...
    @property
    def params(self) -> type[Wire]: ...
    @property
    def result(self) -> type[Wire]: ...
    @property
    def doc(self) -> str: ...
    @property
    def needs_controller(self) -> bool: ...
    @property
    def errors(self) -> tuple[ErrorCode, ...]: ...


METHODS: dict[str, MethodSpec] = {}
"""Every method by name, in the order they are declared below (the schema's order)."""


def _declare(
    name: str,
    params: type[P],
    result: type[R],
    doc: str,
    *,
    needs_controller: bool = False,
    errors: tuple[ErrorCode, ...] = (),
) -> Method[P, R]:
    if name in METHODS:
        raise ValueError(f"method {name!r} is declared twice")
    if needs_controller:
        errors = (ErrorCode.NOT_CONTROLLER, *errors)
    method = METHODS[name] = Method(name, params, result, doc, needs_controller, errors)
    return method


INITIALIZE = _declare(
    "initialize",
    InitializeParams,
    InitializeResult,
    "Must be first; returns versions.",
    errors=(ErrorCode.ALREADY_INITIALIZED, ErrorCode.UNSUPPORTED_PROTOCOL),
)
DAEMON_STATUS = _declare("daemon/status", Empty, DaemonStatusResult, "What the daemon is doing.")
DAEMON_SHUTDOWN = _declare(
    "daemon/shutdown", Empty, Empty, "Stop the daemon; running turns are interrupted."
)
WORKSPACE_TRUST = _declare(
    "workspace/trust",
    WorkspaceTrustParams,
    WorkspaceTrustResult,
    "Whether the user trusts the workspace; `trusted` true or false sets it.",
)
SESSION_CREATE = _declare(
    "session/create",
    SessionCreateParams,
    SessionCreateResult,
    "Start a conversation.",
    errors=(ErrorCode.WORKTREE_FAILED,),
)
SESSION_LIST = _declare("session/list", Empty, SessionListResult, "All sessions, newest first.")
SESSION_READ = _declare(
    "session/read",
    SessionRef,
    SessionReadResult,
    "A snapshot, without subscribing.",
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)
SESSION_ATTACH = _declare(
    "session/attach",
    SessionAttachParams,
    SessionAttachResult,
    "Catch up and subscribe, atomically.",
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)
SESSION_DETACH = _declare(
    "session/detach",
    SessionRef,
    Empty,
    "Stop receiving a session's events.",
    errors=(ErrorCode.NOT_ATTACHED,),
)
SESSION_DELETE = _declare(
    "session/delete",
    SessionDeleteParams,
    Empty,
    "Delete a session with its events, undo snapshots and worktree; SESSION_BUSY while a turn"
    " runs, WORKTREE_UNMERGED when its worktree holds changes not merged (unless `force`)."
    " Attached clients are detached and sent `session/deleted`.",
    needs_controller=True,
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.SESSION_BUSY,
        ErrorCode.WORKTREE_UNMERGED,
        ErrorCode.WORKTREE_FAILED,
    ),
)
SESSION_CONFIGURE = _declare(
    "session/configure",
    SessionConfigureParams,
    SessionConfigureResult,
    "Change a session's permission mode, model, subagent model or MCP servers; attached clients "
    "get `session_configured`.",
    needs_controller=True,
    errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.NOT_ATTACHED, ErrorCode.SHUTTING_DOWN),
)
TURN_START = _declare(
    "turn/start",
    TurnStartParams,
    TurnStartResult,
    "Run the agent on a message.",
    needs_controller=True,
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.SESSION_BUSY,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.IMAGES_UNSUPPORTED,
        ErrorCode.WORKTREE_FAILED,
    ),
)
TURN_CANCEL = _declare(
    "turn/cancel",
    TurnCancelParams,
    TurnCancelResult,
    "Cancel the running turn.",
    needs_controller=True,
    errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.NO_RUNNING_TURN),
)
APPROVAL_RESPOND = _declare(
    "approval/respond",
    ApprovalRespondParams,
    Empty,
    "Answer a pending approval; the first answer wins.",
    needs_controller=True,
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.APPROVAL_NOT_FOUND,
        ErrorCode.APPROVAL_RESOLVED,
    ),
)


# --- approval/list: the workspace's pending approvals --------------------------------------


class PendingApproval(Wire, frozen=True, kw_only=True):
    """An approval waiting in one of the workspace's sessions."""

    session_id: str
    approval: ApprovalRequest
    other_controllers: int = 0
    """Controllers attached to the session other than the client asking: someone there may
    answer it."""


class ApprovalListResult(Wire, frozen=True, kw_only=True):
    """The pending approvals of every loaded session."""

    approvals: list[PendingApproval]
    """Oldest first."""


APPROVAL_LIST = _declare(
    "approval/list",
    Empty,
    ApprovalListResult,
    "Every pending approval of the workspace's sessions, oldest first.",
)


SESSION_UNDO = _declare(
    "session/undo",
    SessionUndoParams,
    SessionUndoResult,
    "Restore the files a turn changed.",
    needs_controller=True,
    errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.TURN_NOT_FOUND, ErrorCode.NOTHING_TO_UNDO),
)
SESSION_COMPACT = _declare(
    "session/compact",
    SessionRef,
    SessionCompactResult,
    "Summarise the session's older history now.",
    needs_controller=True,
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.SESSION_BUSY,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.MODEL_UNAVAILABLE,
        ErrorCode.COMPACTION_FAILED,
    ),
)
LSP_STATUS = _declare("lsp/status", Empty, LspStatusResult, "The language servers the daemon runs.")
MODELS_LIST = _declare(
    "models/list",
    Empty,
    ModelsListResult,
    "The models the provider serves.",
    errors=(ErrorCode.MODEL_UNAVAILABLE,),
)
PROCESS_LIST = _declare(
    "process/list", Empty, ProcessListResult, "Background processes the daemon owns."
)
PROCESS_OUTPUT = _declare(
    "process/output",
    ProcessOutputParams,
    ProcessOutputResult,
    "The end of a background process's output, without taking it from the model.",
    errors=(ErrorCode.PROCESS_NOT_FOUND,),
)
PROCESS_KILL = _declare(
    "process/kill",
    ProcessKillParams,
    Empty,
    "Stop a background process and its tree.",
    errors=(ErrorCode.PROCESS_NOT_FOUND,),
)
TOOLS_LIST = _declare("tools/list", Empty, ToolsListResult, "The tools the model can call.")


# --- skills/list: the skills the agent can load --------------------------------------------


class SkillInfo(Wire, frozen=True, kw_only=True):
    """One skill the agent can load."""

    name: str
    description: str
    origin: SkillOrigin
    source: str
    """The folder it was found in (`.tether/skills`, `~/.config/tether/skills`, …)."""
    path: str
    """Its `SKILL.md`."""
    trusted: bool
    """The agent may use it: a user's skill always, a workspace's once the user said yes."""
    globs: list[str] = []
    """`paths` and `autoAttach`: files that put it at the top of the catalog."""
    warnings: list[str] = []
    """Things worth fixing that do not stop it loading (a skill it overrides, …)."""


class InvalidSkill(Wire, frozen=True, kw_only=True):
    """A `SKILL.md` that is not loaded, and why; never shown to the model."""

    path: str
    origin: SkillOrigin
    reason: str


class SkillsListResult(Wire, frozen=True, kw_only=True):
    """The skills as the next turn would read them."""

    skills: list[SkillInfo] = []
    """By name."""
    invalid: list[InvalidSkill] = []
    catalog_tokens: int = 0
    """Estimated tokens the catalog adds to the system prompt, and the `skill` tool's schema
    to every request (0: no skills, nothing is added)."""
    workspace_trusted: bool = False
    """The user trusts this workspace's skills."""
    sources: list[str] = []
    """The folders looked in, lowest first (a later one wins a name)."""


SKILLS_LIST = _declare(
    "skills/list",
    Empty,
    SkillsListResult,
    "The skills of the user and the workspace, read now, with the invalid ones and why.",
)

# --- hooks/list: the user's hooks ----------------------------------------------------------


class HookInfo(Wire, frozen=True, kw_only=True):
    """One hook of the user's config, in the order they run."""

    event: HookEvent
    command: str
    name: str = ""
    match: list[str] = []
    """The permission rules a call must match (empty: every call; tool events only)."""
    timeout_seconds: float = 0.0


class HooksListResult(Wire, frozen=True, kw_only=True):
    """The hooks a turn starting now would run."""

    hooks: list[HookInfo] = []
    config_file: str = ""
    """The user's config file, where hooks are configured."""
    error: str = ""
    """Why the config cannot be read now (the hooks listed are those the daemon started with)."""
    workspace_ignored: bool = False
    """The workspace's `.tether/config.toml` sets hooks, which are never read."""


HOOKS_LIST = _declare(
    "hooks/list", Empty, HooksListResult, "The user's hooks, as the next turn would run them."
)

# --- mcp/status, mcp/approve: the MCP servers the agent's tools come from ------------------


class McpToolSummary(Wire, frozen=True, kw_only=True):
    """One tool a running MCP server offers (the model sees it as `mcp__SERVER__NAME`)."""

    name: str
    description: str = ""
    read_only: bool = False
    """The server says it changes nothing (`readOnlyHint`)."""


class McpToolLeftOut(Wire, frozen=True, kw_only=True):
    """A tool a running MCP server lists that tether does not offer the model."""

    name: str
    reason: str
    """Why, for a person: `it runs only as a task (execution.taskSupport "required"), which
    tether does not support`, or what is wrong with its `x-mcp-header` markings."""


class McpServerInfo(Wire, frozen=True, kw_only=True):
    """One MCP server of the workspace, whatever its state."""

    name: str
    source: Literal["user", "workspace"]
    """`user`: the user's config.toml; `workspace`: the workspace's `.mcp.json` (or
    `.tether/mcp.json`), which runs only once approved."""
    origin: str = ""
    """The file that defines it."""
    transport: Literal["stdio", "http"]
    state: McpServerState
    tools: list[McpToolSummary] = []
    """As last listed (empty unless running)."""
    left_out: list[McpToolLeftOut] = []
    """Tools it lists that the model is not offered, with why (empty unless running)."""
    last_error: str = ""
    pid: int | None = None
    restarts: int = 0
    command: list[str] = []
    url: str = ""
    revision: str = ""
    """The MCP revision spoken on its last connection (`2026-07-28`, or one reached by the
    older `initialize` handshake such as `2025-11-25`); empty until it first connected."""
    approval_reason: str = ""
    """Why a `needs_approval` server needs it: `not approved yet`, `its definition changed
    since it was approved`, `server.js changed since it was approved`."""


class McpStatusResult(Wire, frozen=True, kw_only=True):
    """The workspace's MCP servers (the user's and the workspace's), whatever their state."""

    servers: list[McpServerInfo] = []
    problems: list[str] = []
    """Definitions that were not used, and why (an invalid `.mcp.json`, a workspace server
    shadowed by the user's own)."""


class McpApproveParams(Wire, frozen=True, kw_only=True):
    """Which workspace server to approve."""

    name: str
    """A workspace server, approved as it is defined now (a changed definition asks again)."""


class McpApproveResult(Wire, frozen=True, kw_only=True):
    """The server as approved; it starts with the next turn."""

    server: McpServerInfo


MCP_STATUS = _declare(
    "mcp/status",
    Empty,
    McpStatusResult,
    "The workspace's MCP servers as the next turn would use them: state, revision, tools, "
    "last error.",
)
MCP_APPROVE = _declare(
    "mcp/approve",
    McpApproveParams,
    McpApproveResult,
    "Let a workspace's MCP server run, remembered for the workspace.",
    errors=(ErrorCode.MCP_SERVER_NOT_FOUND,),
)

# --- session/fork, session/rename, session/search, session/events: sessions people manage ---

TITLE_MAX_CHARS = 200
"""The longest title `session/rename` takes (after trimming)."""
SEARCH_MAX_HITS = 200
"""The most hits `session/search` returns at once."""
EVENTS_MAX_PAGE = 5000
"""The most events `session/events` returns at once."""


class SessionForkParams(Wire, frozen=True, kw_only=True):
    """A new session whose history is the source's conversation up to and including
    `turn_id`. The fork's events replay those turns as they happened (the same item and
    turn ids, its compaction summaries included), so its model sees that conversation.

    Not carried over: the workspace's files (the fork works on the files as they are now,
    not as they were after `turn_id`), the edit guard's read versions (the agent reads a
    file again before editing it), undo snapshots (the copied turns cannot be undone from
    the fork) and anything of a turn still running."""

    session_id: str
    turn_id: str | None = None
    """The last turn to keep; none: every completed turn (a running turn is left out). The
    running turn itself is refused with SESSION_BUSY, an unknown one with TURN_NOT_FOUND."""
    title: str = ""
    """The fork's title (trimmed, at most 200 characters); empty: the source's title with
    ` (fork)` after it."""


class SessionForkResult(Wire, frozen=True, kw_only=True):
    """The fork, not attached (send `session/attach`)."""

    session: SessionInfo
    """Its `forkedFrom` names the source and the last turn copied."""
    note: str = ""
    """What a person should be told once: files were not copied."""


class SessionRenameParams(Wire, frozen=True, kw_only=True):
    """Give a session a title. Attached clients get `session_renamed`."""

    session_id: str
    title: str
    """Trimmed, runs of whitespace made one space; at most 200 characters (longer is
    INVALID_PARAMS, as are control characters). Empty: back to the automatic title (the
    first line of the session's first message, or none before its first turn)."""


class SessionRenameResult(Wire, frozen=True, kw_only=True):
    """The session with its new title."""

    session: SessionInfo


class SessionSearchParams(Wire, frozen=True, kw_only=True):
    """Search the prompts and answers of the workspace's sessions (full text, SQLite FTS5).

    By default every word of `query` must appear (in any order, whole words after Unicode
    case folding and diacritics removed), and the words are taken literally: quotes,
    `AND`, `*` or `-` mean nothing special. With `syntax`, `query` is FTS5's own query
    language (phrases in quotes, `OR`, `NOT`, `NEAR(...)`, `prefix*`); a query that is not
    valid in it is SEARCH_QUERY_INVALID. Tool calls and their output are not searched."""

    query: str
    """Empty (or only punctuation) is INVALID_PARAMS."""
    limit: int = 20
    """At most 200."""
    session_id: str | None = None
    """Search only this session."""
    syntax: bool = False
    """Read `query` as FTS5 query syntax."""


class SnippetPart(Wire, frozen=True, kw_only=True):
    """A piece of a hit's snippet; `match` marks the words that matched."""

    text: str
    match: bool = False


class SearchHit(Wire, frozen=True, kw_only=True):
    """One message that matched."""

    session_id: str
    title: str
    """The session's title now."""
    turn_id: str
    item_id: str
    """The `user_message` or `agent_message` item."""
    kind: Literal["prompt", "answer"]
    """`prompt`: what a person sent; `answer`: what the agent replied."""
    snippet: str
    """Up to about 16 words of the message around the match, `…` where it was cut."""
    parts: list[SnippetPart] = []
    """`snippet` in pieces, the matched words marked."""
    rank: float
    """FTS5's bm25 score: lower (more negative) is a better match. Hits come best first."""
    updated_at: float = 0.0
    """When the session was last used (seconds since the Unix epoch)."""


class SessionSearchResult(Wire, frozen=True, kw_only=True):
    """The best hits first; `query` is what was searched for, in FTS5 syntax."""

    hits: list[SearchHit]
    query: str = ""


class SessionEventsParams(Wire, frozen=True, kw_only=True):
    """Read a session's persisted event log, oldest first, in pages."""

    session_id: str
    after_seq: int = 0
    """Events after this seq (0: from the first)."""
    limit: int = 1000
    """At most 5,000."""


class EventRecord(Wire, frozen=True, kw_only=True):
    """One persisted event with its seq. `tether export --format json` writes one per line."""

    seq: int
    event: AnyEvent


class SessionEventsResult(Wire, frozen=True, kw_only=True):
    """A page of the event log: every persisted event (not `item_delta`, `model_retry` or
    `context_updated`), so seqs jump where those were. Read on with `afterSeq` set to the
    last seq while `more` is true."""

    session: SessionInfo
    events: list[EventRecord]
    more: bool = False


class ImageReadParams(Wire, frozen=True, kw_only=True):
    """Names an image of a session by its digest (`ImageRef.sha256` of a user message's or a
    tool call's `images`)."""

    session_id: str
    sha256: str


class ImageReadResult(Wire, frozen=True, kw_only=True):
    """The image's bytes, as the model is sent them; its `ImageRef` says their MIME type."""

    data: bytes
    """Base64 on the wire."""


SESSION_FORK = _declare(
    "session/fork",
    SessionForkParams,
    SessionForkResult,
    "A new session with the conversation up to a turn; files are not copied (a worktree"
    " session's fork works in a worktree of its own, made from the parent's as it is).",
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.TURN_NOT_FOUND,
        ErrorCode.SESSION_BUSY,
        ErrorCode.WORKTREE_FAILED,
    ),
)
SESSION_RENAME = _declare(
    "session/rename",
    SessionRenameParams,
    SessionRenameResult,
    "Give a session a title (empty: the automatic one); attached clients get `session_renamed`.",
    needs_controller=True,
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)
SESSION_SEARCH = _declare(
    "session/search",
    SessionSearchParams,
    SessionSearchResult,
    "Full-text search of the workspace's prompts and answers.",
    errors=(ErrorCode.SEARCH_QUERY_INVALID,),
)
SESSION_EVENTS = _declare(
    "session/events",
    SessionEventsParams,
    SessionEventsResult,
    "A page of a session's persisted event log.",
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)
IMAGE_READ = _declare(
    "image/read",
    ImageReadParams,
    ImageReadResult,
    "The bytes of an image a session's items describe (events carry only its `ImageRef`); "
    "INVALID_PARAMS when the session keeps no image with that digest.",
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)


class FileReadParams(Wire, frozen=True, kw_only=True):
    """A window of a text file around a line, for a client that shows a location
    (`path:line`) but cannot read files itself (a browser). Read-only and bounded: the file is
    reached beneath the root without following a symlink, credential-like files are refused,
    and so are binary files and files over 2 MB."""

    session_id: str | None = None
    """Relative to this session's root (its worktree, if it has one); else the workspace's."""
    path: str
    """Relative to the root, or absolute inside it."""
    line: int = 1
    """The line to show (1-based); past the end: the file's last lines."""
    before: int = 20
    """Lines before `line` (at most 200)."""
    after: int = 40
    """Lines after `line` (at most 400)."""


class FileReadResult(Wire, frozen=True, kw_only=True):
    """The lines of a file's window, without their line ends."""

    path: str
    """Relative to the root it was read under."""
    start_line: int
    """The number of `lines[0]` (1-based)."""
    lines: list[str]
    total_lines: int
    """The file's line count."""
    truncated: bool = False
    """A line longer than 1,000 characters was cut."""


FILE_READ = _declare(
    "file/read",
    FileReadParams,
    FileReadResult,
    "A window of a text file of the workspace (or of a session's worktree) around a line; "
    "INVALID_PARAMS (the message says why) for a path outside the root or through a symlink, a "
    "credential-like file, a binary file, a missing file or one over 2 MB.",
    errors=(ErrorCode.SESSION_NOT_FOUND,),
)

# --- worktrees: sessions that work in a git worktree of their own ---------------------------


class ChangedFile(Wire, frozen=True, kw_only=True):
    """One file a session's worktree changed."""

    path: str
    """Relative to the repository's top folder."""
    added: int
    """Lines added (0 for a binary file)."""
    removed: int
    binary: bool = False


class SessionDiffResult(Wire, frozen=True, kw_only=True):
    """A worktree session's changes against its base, committed or not."""

    patch: str
    """A unified diff `git apply` takes (binary files included)."""
    files: list[ChangedFile]


class SessionMergeParams(Wire, frozen=True, kw_only=True):
    """Bring a worktree session's changes into the workspace's current branch."""

    session_id: str
    squash: bool = False
    """One plain commit rather than a merge commit."""


class SessionMergeResult(Wire, frozen=True, kw_only=True):
    """What a merge brought into the workspace's branch."""

    commit: str
    """The workspace's new `HEAD` (empty: there was nothing to merge)."""
    files: list[str]
    """The files the merge changed."""


class WorktreeEntry(Wire, frozen=True, kw_only=True):
    """A session's worktree."""

    session_id: str
    title: str = ""
    worktree: WorktreeInfo
    age_seconds: float
    """Since its folder last changed."""
    merged: bool
    """Merging it would change nothing (merged already, or it changed nothing)."""
    missing: bool = False
    """Its folder is gone (removed by hand); the session's turns cannot run."""


class WorktreeListResult(Wire, frozen=True, kw_only=True):
    """The worktrees of the workspace's sessions, newest session first."""

    worktrees: list[WorktreeEntry]


class WorktreePruneResult(Wire, frozen=True, kw_only=True):
    """What `worktree/prune` removed."""

    removed: list[str]
    """The sessions whose worktrees were removed (merged, or their folders gone); the sessions
    themselves stay."""


SESSION_DIFF = _declare(
    "session/diff",
    SessionRef,
    SessionDiffResult,
    "A worktree session's changes against its base, as a patch and per file.",
    errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.WORKTREE_FAILED),
)
SESSION_MERGE = _declare(
    "session/merge",
    SessionMergeParams,
    SessionMergeResult,
    "Bring a worktree session's changes into the workspace's current branch; MERGE_CONFLICT "
    "(nothing changed, `data` names the files) when they conflict.",
    needs_controller=True,
    errors=(
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.SESSION_BUSY,
        ErrorCode.MERGE_CONFLICT,
        ErrorCode.WORKTREE_FAILED,
    ),
)
WORKTREE_LIST = _declare(
    "worktree/list",
    Empty,
    WorktreeListResult,
    "The sessions' worktrees, merged or not.",
    errors=(ErrorCode.WORKTREE_FAILED,),
)
WORKTREE_PRUNE = _declare(
    "worktree/prune",
    Empty,
    WorktreePruneResult,
    "Remove the worktrees that are merged or whose folders are gone.",
    errors=(ErrorCode.WORKTREE_FAILED,),
)

NOTIFICATIONS: dict[str, type[Wire]] = {
    "session/event": SessionEventParams,
    "session/resync": SessionResyncParams,
    "session/deleted": SessionDeletedParams,
    "daemon/event": DaemonEventParams,
}
