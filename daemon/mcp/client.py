"""An MCP client session over one transport: settling the revision, `tools/list`,
`tools/call`.

Spoken: MCP 2026-07-28 (stateless: every request carries the revision, tether's (empty)
capabilities and its name in `_meta`) with a server that speaks it, else the 2025-11-25
`initialize` handshake (also accepted from the server: 2025-06-18, 2025-03-26,
2024-11-05). `connect` finds out which: `server/discover` first (every 2026-07-28 server
implements it); a discovery result naming 2026-07-28 settles it, a recognized 2026-07-28
error (-32020…-32022) is the server's word, and anything else — another error, an HTTP
4xx without such an error, no answer within `PROBE_TIMEOUT` — means an older server, so
the handshake follows. Given the revision a server spoke last time (`hint`), an older one
goes straight to the handshake.

tether offers no client capabilities (roots, sampling, elicitation), so a request from the
server is answered "method not found", except `ping`; a 2026-07-28 result asking for input
(`resultType: input_required`) fails the request. A `notifications/tools/list_changed`
marks the tool list stale, and so does the end of the freshness a 2026-07-28 `tools/list`
gives (`ttlMs`); the pool lists them again before the next turn offers them
(`tools_stale`). Speaking 2026-07-28, those notifications come only on a
`subscriptions/listen` (`listen`), held open while the server announces them.

A `tools/call` asks for progress reports: its `_meta.progressToken` is the request's id, and
each `notifications/progress` naming a request still waiting goes to that call's
`on_progress`. A tool the server marks `execution.taskSupport: "required"` is left out of
the list (`left_out`): tether does not run MCP tasks.

Every request has a timeout: when it passes, or the caller is cancelled, the request is
cancelled at the server — `notifications/cancelled`, except over 2026-07-28 HTTP where
closing the request's response stream is the cancellation — and the call raises
`McpTimeout` (or the cancellation propagates). When the transport ends, every waiting
request fails with `McpUnavailable`.
"""

import contextlib
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple, Protocol, TypeVar, cast

import msgspec
import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.mcp.errors import (
    McpError,
    McpHttpStatus,
    McpNotDelivered,
    McpProtocolError,
    McpRemoteError,
    McpTimeout,
    McpUnavailable,
)
from tether.daemon.mcp.headers import ParamPaths, mirrored_params, param_headers
from tether.protocol.events import ToolProgress
from tether.protocol.version import __version__

log = get_logger(__name__)

MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = (MODERN_VERSION,)
"""The stateless revisions: per-request `_meta`, no handshake."""
LEGACY_VERSION = "2025-11-25"
LEGACY_VERSIONS = (LEGACY_VERSION, "2025-06-18", "2025-03-26", "2024-11-05")
"""The revisions reached by the `initialize` handshake; the first is offered."""
MODERN_ERRORS = (-32020, -32021, -32022)
"""HeaderMismatch, MissingRequiredClientCapability, UnsupportedProtocolVersion: a server
answering with one of these speaks 2026-07-28 or later."""
UNSUPPORTED_VERSION = -32022
PROBE_TIMEOUT = 5.0
"""How long `server/discover` may go unanswered before the server is taken for an older one
(some never answer a request that comes before `initialize`)."""
CANCEL_NOTICE_TIMEOUT = 1.0
CLIENT_INFO: dict[str, object] = {"name": "tether", "version": __version__}
NAMED_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

Deliver = Callable[[object], None]
OnProgress = Callable[[ToolProgress], None]
T = TypeVar("T")


class Route(NamedTuple):
    """What an HTTP request mirrors in its headers: the method, its target (a tool's name,
    a resource's URI) and the `Mcp-Param-*` values."""

    method: str
    name: str = ""
    params: Mapping[str, str] = {}


class Transport(Protocol):
    """How messages travel. `send` delivers the encoded message (for HTTP it also hands the
    messages the response carries to `deliver`); `serve` runs until the connection ends
    (returns, or raises McpError) and hands every incoming message to `deliver`."""

    kind: Literal["stdio", "http"]

    async def send(self, message: bytes, deliver: Deliver, route: Route | None = None) -> None: ...

    async def serve(self, deliver: Deliver) -> None: ...

    def negotiated(self, version: str) -> None:
        """Told the revision requests are sent with from now on ("" before the handshake)."""
        ...


class ToolAnnotations(msgspec.Struct, kw_only=True, frozen=True):
    readOnlyHint: bool = False
    destructiveHint: bool = True
    title: str = ""


class ToolExecution(msgspec.Struct, kw_only=True, frozen=True):
    taskSupport: str = "forbidden"
    """`forbidden`, `optional` or `required`: whether a call may, or must, run as a task."""


class McpTool(msgspec.Struct, kw_only=True, frozen=True):
    """A tool as the server lists it."""

    name: str
    description: str = ""
    inputSchema: dict[str, object] = msgspec.field(default_factory=lambda: {"type": "object"})
    annotations: ToolAnnotations | None = None
    title: str = ""
    execution: ToolExecution | None = None


class _ToolsPage(msgspec.Struct, kw_only=True):
    tools: list[McpTool] = []
    nextCursor: str | None = None


class ServerInfo(msgspec.Struct, kw_only=True, frozen=True):
    name: str = ""
    version: str = ""


class _InitializeResult(msgspec.Struct, kw_only=True):
    protocolVersion: str
    serverInfo: ServerInfo = msgspec.field(default_factory=ServerInfo)
    instructions: str = ""


class _ToolsCapability(msgspec.Struct, kw_only=True):
    listChanged: bool = False


class _Capabilities(msgspec.Struct, kw_only=True):
    tools: _ToolsCapability | None = None


class _DiscoverResult(msgspec.Struct, kw_only=True):
    supportedVersions: list[str]
    capabilities: _Capabilities = msgspec.field(default_factory=_Capabilities)
    instructions: str = ""
    meta: dict[str, object] = msgspec.field(name="_meta", default_factory=dict)


class _ToolsPageTtl(msgspec.Struct, kw_only=True):
    ttlMs: float | None = None


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: object = None
        self.error: McpError | None = None


class McpClient:
    """One session with a server. `run` (in a nursery) must be going for requests to be
    answered; it returns when the transport ends."""

    def __init__(
        self, transport: Transport, *, name: str, probe_timeout: float = PROBE_TIMEOUT
    ) -> None:
        self.transport = transport
        self.name = name
        self.probe_timeout = probe_timeout
        self.server_info = ServerInfo()
        self.revision = ""
        """The revision settled by `connect`."""
        self.tools_changed = False
        self.left_out: dict[str, str] = {}
        """The tools the last `list_tools` left out, with why."""
        self._fresh_until = math.inf
        self._announces_changes = False
        self._mirrored: dict[str, ParamPaths] = {}
        self._meta: dict[str, object] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._progress: dict[int, OnProgress] = {}
        self._ended: str = ""
        self._answers_send, self._answers = trio.open_memory_channel[bytes](64)

    async def run(self) -> None:
        """Serve the transport until it ends; then every waiting request fails. Returns the
        way the transport did (its McpError propagates after the waiting requests failed)."""
        failure: McpError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_answers)
            try:
                await self.transport.serve(self.deliver)
            except McpError as exc:
                failure = exc
                self.end(str(exc))
            finally:
                self.end("the server closed the connection")
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    def end(self, reason: str) -> None:
        if not self._ended:
            self._ended = reason
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.error = McpUnavailable(f"MCP server {self.name}: {self._ended}")
                pending.done.set()

    async def _send_answers(self) -> None:
        async for message in self._answers:
            try:
                await self.transport.send(message, self.deliver)
            except McpError as exc:  # the connection is ending; `run` reports that
                log.info(
                    "an answer to an MCP server was not delivered", server=self.name, error=exc
                )

    def deliver(self, message: object) -> None:
        """One incoming message (decoded JSON): a response, a request, a notification."""
        if isinstance(message, list):
            for item in cast("list[object]", message):
                self.deliver(item)
            return
        if not isinstance(message, dict):
            log.warning("an MCP server sent a non-object message", server=self.name)
            return
        body = cast("dict[str, object]", message)
        method = body.get("method")
        if isinstance(method, str):
            if "id" in body:
                self._answer(body["id"], method)
            elif method == "notifications/tools/list_changed":
                self.tools_changed = True
            elif method == "notifications/progress":
                self._progressed(body.get("params"))
            return
        ident = body.get("id")
        pending = self._pending.get(ident) if isinstance(ident, int) else None
        if pending is None or pending.done.is_set():
            return
        error = body.get("error")
        if isinstance(error, dict):
            detail = cast("dict[str, object]", error)
            code = detail.get("code")
            pending.error = McpRemoteError(
                code if isinstance(code, int) else 0,
                str(detail.get("message", "")),
                detail.get("data"),
            )
        elif "result" in body:
            pending.result = body["result"]
        else:
            pending.error = McpProtocolError("a response with neither result nor error")
        pending.done.set()

    def _progressed(self, params: object) -> None:
        """A `notifications/progress` for a request still waiting (its token is the request's
        id); any other is dropped."""
        if not isinstance(params, dict):
            return
        fields = cast("dict[str, object]", params)
        token, progress = fields.get("progressToken"), fields.get("progress")
        report = self._progress.get(token) if isinstance(token, int) else None
        if report is None or not isinstance(progress, int | float):
            return
        total, message = fields.get("total"), fields.get("message")
        report(
            ToolProgress(
                progress=float(progress),
                total=float(total) if isinstance(total, int | float) else None,
                message=message[:500] if isinstance(message, str) else "",
            )
        )

    def _answer(self, ident: object, method: str) -> None:
        if method == "ping":
            reply: dict[str, object] = {"jsonrpc": "2.0", "id": ident, "result": {}}
        else:
            reply = {
                "jsonrpc": "2.0",
                "id": ident,
                "error": {"code": -32601, "message": f"tether does not offer {method}"},
            }
        try:
            self._answers_send.send_nowait(msgspec.json.encode(reply))
        except trio.WouldBlock:
            log.warning(
                "an MCP server left too many requests unanswered; dropped one", server=self.name
            )

    @property
    def modern(self) -> bool:
        return self.revision in MODERN_VERSIONS

    def _speak(self, revision: str) -> None:
        self.revision = revision
        self._meta = (
            {
                "io.modelcontextprotocol/protocolVersion": revision,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
            }
            if revision in MODERN_VERSIONS
            else None
        )
        self.transport.negotiated(revision)

    def tools_stale(self) -> bool:
        """Whether the tools should be listed again: the server said they changed, or the
        freshness its last list gave has passed."""
        return self.tools_changed or trio.current_time() >= self._fresh_until

    async def notify(self, method: str, params: dict[str, object] | None = None) -> None:
        message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.transport.send(msgspec.json.encode(message), self.deliver, Route(method))

    async def request(
        self,
        method: str,
        params: dict[str, object],
        *,
        seconds: float,
        mirrored: Mapping[str, str] | None = None,
        on_progress: OnProgress | None = None,
    ) -> object:
        """Send a request and wait for its result. Raises McpTimeout after `seconds`,
        McpRemoteError for an error answer, McpUnavailable when the connection ends first
        (McpNotDelivered when the request never reached the server), McpProtocolError for a
        2026-07-28 result that is not complete. Cancellation cancels the request at the
        server too, then propagates. `mirrored`: the `Mcp-Param-*` headers of a `tools/call`
        over HTTP. `on_progress`: asks the server for progress reports (a `progressToken`)
        and is given each one while the request waits."""
        if self._ended:
            raise McpNotDelivered(f"MCP server {self.name}: {self._ended}")
        ident = next(self._ids)
        pending = self._pending[ident] = _Pending()
        meta = dict(self._meta or {})
        if on_progress is not None:
            meta["progressToken"] = ident
            self._progress[ident] = on_progress
        if meta:
            params = {**params, "_meta": meta}
        target = params.get(NAMED_METHODS.get(method, ""), "")
        route = Route(method, target if isinstance(target, str) else "", mirrored or {})
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        try:
            with trio.move_on_after(seconds) as scope:
                await self.transport.send(msgspec.json.encode(message), self.deliver, route)
                await pending.done.wait()
            if scope.cancelled_caught:
                await self._cancel_at_server(ident, "timed out")
                raise McpTimeout(
                    f"MCP server {self.name} did not answer {method} within {seconds:g} s; "
                    "the request was cancelled"
                )
        except trio.Cancelled:
            await self._cancel_at_server(ident, "cancelled by the user")
            raise
        finally:
            del self._pending[ident]
            self._progress.pop(ident, None)
        if pending.error is not None:
            raise pending.error
        if self.modern:
            _check_complete(pending.result, method)
        return pending.result

    async def _cancel_at_server(self, ident: int, reason: str) -> None:
        # Over 2026-07-28 HTTP the request's own response stream was closed by the
        # cancellation that brought us here: that is the cancellation, and no
        # notification is defined on that transport.
        if self._ended or (self.modern and self.transport.kind == "http"):
            return
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CANCEL_NOTICE_TIMEOUT),
            contextlib.suppress(McpError),
        ):
            await self.notify("notifications/cancelled", {"requestId": ident, "reason": reason})

    async def connect(self, *, seconds: float, hint: str = "") -> None:
        """Settle the revision (see the module): `server/discover`, and the `initialize`
        handshake when the server is older. `hint`: the revision this server spoke on its
        last connection; an older one is tried directly, and probed only if that fails.
        Raises McpProtocolError when the server speaks no revision tether does."""
        if hint in LEGACY_VERSIONS:
            try:
                await self.initialize(seconds=seconds)
            except (McpRemoteError, McpHttpStatus) as exc:
                log.info(
                    "an MCP server no longer takes the handshake; probing",
                    server=self.name,
                    error=exc,
                )
            else:
                return
        outcome = await self._discover(seconds=min(seconds, self.probe_timeout))
        if outcome == "modern":
            return
        try:
            await self.initialize(seconds=seconds)
        except McpRemoteError as refused:
            # An unanswered probe may only have been slow (a server still starting, on a
            # busy machine) and the server a 2026-07-28 one refusing the handshake: it
            # answers now, so it is asked again, for as long as its start may take.
            if outcome != "unanswered":
                raise
            try:
                again = await self._discover(seconds=seconds)
            except McpError:
                raise refused from None
            if again != "modern":
                raise refused from None

    async def _discover(self, *, seconds: float) -> Literal["modern", "older", "unanswered"]:
        """The probe: "modern" when the server speaks 2026-07-28 (now spoken), otherwise
        the handshake should follow ("unanswered": within `seconds`)."""
        self._speak(MODERN_VERSION)
        outcome: Literal["modern", "older", "unanswered"] = "older"
        try:
            raw = await self.request("server/discover", {}, seconds=seconds)
        except McpTimeout:
            supported, outcome = list(LEGACY_VERSIONS), "unanswered"
        except McpHttpStatus as exc:
            if not 400 <= exc.status < 500:
                raise
            supported = list(LEGACY_VERSIONS)
        except McpRemoteError as exc:
            if exc.code == UNSUPPORTED_VERSION:
                supported = _supported(exc.data)
            elif exc.code in MODERN_ERRORS:
                raise McpProtocolError(f"the server refused server/discover: {exc}") from exc
            else:
                supported = list(LEGACY_VERSIONS)
        else:
            result = _convert(raw, _DiscoverResult, "server/discover")
            supported = result.supportedVersions
            tools = result.capabilities.tools
            self._announces_changes = tools is not None and tools.listChanged
            info = result.meta.get("io.modelcontextprotocol/serverInfo")
            with contextlib.suppress(msgspec.ValidationError):  # only shown, never relied on
                self.server_info = msgspec.convert(info, ServerInfo)
        if MODERN_VERSION in supported:
            return "modern"
        self._speak("")
        if any(version in LEGACY_VERSIONS for version in supported):
            return outcome
        raise McpProtocolError(
            f"the server speaks MCP {', '.join(supported) or '(none named)'}, which tether does "
            f"not (it speaks {', '.join((*MODERN_VERSIONS, *LEGACY_VERSIONS))})"
        )

    async def initialize(self, *, seconds: float) -> None:
        """The 2025-11-25 handshake: `initialize`, then `notifications/initialized`."""
        self._speak("")
        raw = await self.request(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO},
            seconds=seconds,
        )
        result = _convert(raw, _InitializeResult, "initialize")
        if result.protocolVersion not in LEGACY_VERSIONS:
            raise McpProtocolError(
                f"the server speaks MCP {result.protocolVersion}, which tether does not "
                f"(it speaks {', '.join((*MODERN_VERSIONS, *LEGACY_VERSIONS))})"
            )
        self.server_info = result.serverInfo
        self._speak(result.protocolVersion)
        await self.notify("notifications/initialized")

    async def listen(self) -> None:
        """Speaking 2026-07-28 with a server that announces tool list changes: hold a
        `subscriptions/listen` for them open until the connection ends (a server of the
        older revision sends them unasked). When the server ends or refuses it, the tools
        are listed again before the next turn, in case a change went unannounced."""
        if not (self.modern and self._announces_changes):
            return
        try:
            await self.request(
                "subscriptions/listen",
                {"notifications": {"toolsListChanged": True}},
                seconds=math.inf,
            )
        except McpUnavailable:
            return  # the connection ended: the pool reports that
        except McpError as exc:
            log.info("no subscription to an MCP server's tool changes", server=self.name, error=exc)
        self.tools_changed = True

    async def list_tools(self, *, seconds: float) -> list[McpTool]:
        """Every tool tether can call, following `nextCursor` (at most 100 pages); the
        others go to `left_out` with why, and are logged: a tool that runs only as a task
        (`execution.taskSupport: "required"`: tether, asking for no task, would be refused
        with -32601), and over 2026-07-28 HTTP one whose `x-mcp-header` markings are
        invalid."""
        tools: list[McpTool] = []
        cursor: str | None = None
        self.tools_changed = False
        fresh = math.inf
        listed_at = trio.current_time()
        for _ in range(100):
            params: dict[str, object] = {} if cursor is None else {"cursor": cursor}
            raw = await self.request("tools/list", params, seconds=seconds)
            page = _convert(raw, _ToolsPage, "tools/list")
            ttl = _convert(raw, _ToolsPageTtl, "tools/list").ttlMs
            if ttl is not None and ttl >= 0:
                fresh = min(fresh, ttl / 1000)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        self._fresh_until = listed_at + fresh
        self._mirrored = {}
        self.left_out = {}
        kept: list[McpTool] = []
        for tool in tools:
            why = self._why_left_out(tool)
            if why:
                log.warning("an MCP tool is left out", server=self.name, tool=tool.name, error=why)
                self.left_out[tool.name] = why
                continue
            kept.append(tool)
        return kept

    def _why_left_out(self, tool: McpTool) -> str:
        """Why tether cannot call `tool` ("" when it can); records its mirrored headers."""
        if tool.execution is not None and tool.execution.taskSupport == "required":
            return (
                'it runs only as a task (execution.taskSupport "required"), which tether '
                "does not support"
            )
        if self.modern and self.transport.kind == "http":
            try:
                self._mirrored[tool.name] = mirrored_params(tool.inputSchema)
            except ValueError as exc:
                return f"its x-mcp-header markings break the rules: {exc}"
        return ""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, object],
        *,
        seconds: float,
        on_progress: OnProgress | None = None,
    ) -> dict[str, object]:
        paths = self._mirrored.get(name)
        raw = await self.request(
            "tools/call",
            {"name": name, "arguments": arguments},
            seconds=seconds,
            mirrored=param_headers(paths, arguments) if paths else None,
            on_progress=on_progress,
        )
        if not isinstance(raw, dict):
            raise McpProtocolError("tools/call answered with something that is not an object")
        return cast("dict[str, object]", raw)


def _supported(data: object) -> list[str]:
    """The versions an UnsupportedProtocolVersionError names."""
    if isinstance(data, dict):
        supported = cast("dict[str, object]", data).get("supported")
        if isinstance(supported, list):
            return [str(v) for v in cast("list[object]", supported)]
    return []


def _check_complete(result: object, method: str) -> None:
    kind = cast("dict[str, object]", result).get("resultType") if isinstance(result, dict) else None
    if kind is None or kind == "complete":
        return
    if kind == "input_required":
        raise McpProtocolError(
            f"the server answered {method} by asking for input (elicitation, sampling or "
            "roots), which tether does not offer"
        )
    raise McpProtocolError(f"the server answered {method} with a result of type {kind!r}")


def _convert(raw: object, kind: type[T], what: str) -> T:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise McpProtocolError(f"the server's answer to {what} is not MCP: {exc}") from exc
