"""The method table: one entry per JSON-RPC method, mapping its name to its Params and Result.

This table drives the daemon's dispatcher, the Python client's typed calls and the committed
JSON Schema (`packaging/schema/tether-protocol.schema.json`), so the three cannot drift apart.
"""

from typing import Literal

import msgspec

from tether.protocol.base import Wire
from tether.protocol.events import AnyEvent
from tether.protocol.session import Cursor, Role, SessionInfo, SessionSnapshot


class Empty(Wire, frozen=True, kw_only=True):
    """Params or result with no fields."""


# --- initialize -------------------------------------------------------------------------------


class InitializeParams(Wire, frozen=True, kw_only=True):
    client_name: str
    client_version: str = ""
    protocol_version: int = 1


class InitializeResult(Wire, frozen=True, kw_only=True):
    protocol_version: int
    daemon_version: str
    workspace: str
    pid: int


# --- daemon -----------------------------------------------------------------------------------


class DaemonStatusResult(Wire, frozen=True, kw_only=True):
    pid: int
    workspace: str
    daemon_version: str
    protocol_version: int
    started_at: float
    clients: int
    sessions_loaded: int
    running_turns: int
    idle_timeout: float


# --- sessions ---------------------------------------------------------------------------------


class SessionCreateParams(Wire, frozen=True, kw_only=True):
    title: str = ""


class SessionCreateResult(Wire, frozen=True, kw_only=True):
    session: SessionInfo


class SessionListResult(Wire, frozen=True, kw_only=True):
    sessions: list[SessionInfo]


class SessionRef(Wire, frozen=True, kw_only=True):
    session_id: str


class SessionReadResult(Wire, frozen=True, kw_only=True):
    snapshot: SessionSnapshot


class SessionAttachParams(Wire, frozen=True, kw_only=True):
    """Attach to a session: catch up from `after`, then receive live `session/event`s.

    With `after`, the events after that cursor are replayed as `session/event` notifications
    (exactly once each, in order) when the daemon still has them; otherwise, and without
    `after`, the result carries a snapshot and live events continue from its `seq`.
    """

    session_id: str
    after: Cursor | None = None
    role: Role = "controller"


class SessionAttachResult(Wire, frozen=True, kw_only=True):
    epoch: str
    mode: Literal["replay", "snapshot"]
    from_seq: int
    """Live (or replayed) events start after this seq."""
    snapshot: SessionSnapshot | None = None


# --- turns ------------------------------------------------------------------------------------


class TurnStartParams(Wire, frozen=True, kw_only=True):
    session_id: str
    text: str


class TurnStartResult(Wire, frozen=True, kw_only=True):
    turn_id: str


class TurnCancelParams(Wire, frozen=True, kw_only=True):
    session_id: str
    turn_id: str | None = None


class TurnCancelResult(Wire, frozen=True, kw_only=True):
    turn_id: str


# --- tools ------------------------------------------------------------------------------------


class ToolInfo(Wire, frozen=True, kw_only=True):
    name: str
    description: str
    read_only: bool
    input_schema: msgspec.Raw
    """The JSON Schema of the tool's arguments, as the model sees it."""


class ToolsListResult(Wire, frozen=True, kw_only=True):
    tools: list[ToolInfo]


# --- notifications (daemon -> client) ---------------------------------------------------------


class SessionEventParams(Wire, frozen=True, kw_only=True):
    session_id: str
    epoch: str
    seq: int
    event: AnyEvent


class SessionResyncParams(Wire, frozen=True, kw_only=True):
    """The client fell behind and was unsubscribed; re-attach with the last cursor you hold."""

    session_id: str
    reason: str


class Method(msgspec.Struct, frozen=True):
    params: type[Wire]
    result: type[Wire]
    doc: str
    needs_controller: bool = False


METHODS: dict[str, Method] = {
    "initialize": Method(InitializeParams, InitializeResult, "Must be first; returns versions."),
    "daemon/status": Method(Empty, DaemonStatusResult, "What the daemon is doing."),
    "daemon/shutdown": Method(Empty, Empty, "Stop the daemon; running turns are interrupted."),
    "session/create": Method(SessionCreateParams, SessionCreateResult, "Start a conversation."),
    "session/list": Method(Empty, SessionListResult, "All sessions, newest first."),
    "session/read": Method(SessionRef, SessionReadResult, "A snapshot, without subscribing."),
    "session/attach": Method(
        SessionAttachParams, SessionAttachResult, "Catch up and subscribe, atomically."
    ),
    "session/detach": Method(SessionRef, Empty, "Stop receiving a session's events."),
    "turn/start": Method(
        TurnStartParams, TurnStartResult, "Run the agent on a message.", needs_controller=True
    ),
    "turn/cancel": Method(
        TurnCancelParams, TurnCancelResult, "Cancel the running turn.", needs_controller=True
    ),
    "tools/list": Method(Empty, ToolsListResult, "The tools the model can call."),
}

NOTIFICATIONS: dict[str, type[Wire]] = {
    "session/event": SessionEventParams,
    "session/resync": SessionResyncParams,
}
