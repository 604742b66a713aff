"""An MCP client session over one transport: the handshake, `tools/list`, `tools/call`.

Spoken: MCP 2025-11-25 (also accepted from the server: 2025-06-18, 2025-03-26, 2024-11-05),
JSON-RPC 2.0 messages. tether offers no client capabilities (roots, sampling, elicitation),
so a request from the server is answered "method not found", except `ping`. A
`notifications/tools/list_changed` marks the tool list stale (`tools_changed`); the pool
lists them again before the next turn offers them.

Every request has a timeout: when it passes, or the caller is cancelled, the server is sent
`notifications/cancelled` for it and the call raises `McpTimeout` (or the cancellation
propagates). When the transport ends, every waiting request fails with `McpUnavailable`.
"""

import contextlib
import itertools
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

import msgspec
import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.mcp.errors import (
    McpError,
    McpProtocolError,
    McpRemoteError,
    McpTimeout,
    McpUnavailable,
)

log = get_logger(__name__)

PROTOCOL_VERSION = "2025-11-25"
ACCEPTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
CANCEL_NOTICE_TIMEOUT = 1.0

Deliver = Callable[[object], None]
T = TypeVar("T")


class Transport(Protocol):
    """How messages travel. `send` delivers the encoded message (for HTTP it also hands the
    messages the response carries to `deliver`); `serve` runs until the connection ends
    (returns, or raises McpError) and hands every incoming message to `deliver`."""

    async def send(self, message: bytes, deliver: Deliver) -> None: ...

    async def serve(self, deliver: Deliver) -> None: ...

    def negotiated(self, version: str) -> None:
        """Told the protocol version once the handshake settled it."""
        ...


class ToolAnnotations(msgspec.Struct, kw_only=True, frozen=True):
    readOnlyHint: bool = False
    destructiveHint: bool = True
    title: str = ""


class McpTool(msgspec.Struct, kw_only=True, frozen=True):
    """A tool as the server lists it."""

    name: str
    description: str = ""
    inputSchema: dict[str, object] = msgspec.field(default_factory=lambda: {"type": "object"})
    annotations: ToolAnnotations | None = None
    title: str = ""


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


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: object = None
        self.error: McpError | None = None


class McpClient:
    """One session with a server. `run` (in a nursery) must be going for requests to be
    answered; it returns when the transport ends."""

    def __init__(self, transport: Transport, *, name: str) -> None:
        self.transport = transport
        self.name = name
        self.server_info = ServerInfo()
        self.tools_changed = False
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
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
                code if isinstance(code, int) else 0, str(detail.get("message", ""))
            )
        elif "result" in body:
            pending.result = body["result"]
        else:
            pending.error = McpProtocolError("a response with neither result nor error")
        pending.done.set()

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

    async def notify(self, method: str, params: dict[str, object] | None = None) -> None:
        message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.transport.send(msgspec.json.encode(message), self.deliver)

    async def request(self, method: str, params: dict[str, object], *, seconds: float) -> object:
        """Send a request and wait for its result. Raises McpTimeout after `seconds`,
        McpRemoteError for an error answer, McpUnavailable when the connection ends first.
        Cancellation cancels the request at the server too, then propagates."""
        if self._ended:
            raise McpUnavailable(f"MCP server {self.name}: {self._ended}")
        ident = next(self._ids)
        pending = self._pending[ident] = _Pending()
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        try:
            with trio.move_on_after(seconds) as scope:
                await self.transport.send(msgspec.json.encode(message), self.deliver)
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
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def _cancel_at_server(self, ident: int, reason: str) -> None:
        if self._ended:
            return
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CANCEL_NOTICE_TIMEOUT),
            contextlib.suppress(McpError),
        ):
            await self.notify("notifications/cancelled", {"requestId": ident, "reason": reason})

    async def initialize(self, *, seconds: float) -> None:
        """The handshake: `initialize`, then `notifications/initialized`."""
        raw = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "tether", "version": "0.1.0"},
            },
            seconds=seconds,
        )
        result = _convert(raw, _InitializeResult, "initialize")
        if result.protocolVersion not in ACCEPTED_VERSIONS:
            raise McpProtocolError(
                f"the server speaks MCP {result.protocolVersion}, which tether does not "
                f"(it speaks {', '.join(ACCEPTED_VERSIONS)})"
            )
        self.server_info = result.serverInfo
        self.transport.negotiated(result.protocolVersion)
        await self.notify("notifications/initialized")

    async def list_tools(self, *, seconds: float) -> list[McpTool]:
        """Every tool, following `nextCursor` (at most 100 pages)."""
        tools: list[McpTool] = []
        cursor: str | None = None
        self.tools_changed = False
        for _ in range(100):
            params: dict[str, object] = {} if cursor is None else {"cursor": cursor}
            page = _convert(
                await self.request("tools/list", params, seconds=seconds), _ToolsPage, "tools/list"
            )
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, object], *, seconds: float
    ) -> dict[str, object]:
        raw = await self.request(
            "tools/call", {"name": name, "arguments": arguments}, seconds=seconds
        )
        if not isinstance(raw, dict):
            raise McpProtocolError("tools/call answered with something that is not an object")
        return cast("dict[str, object]", raw)


def _convert(raw: object, kind: type[T], what: str) -> T:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise McpProtocolError(f"the server's answer to {what} is not MCP: {exc}") from exc
