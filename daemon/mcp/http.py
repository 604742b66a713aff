"""The streamable HTTP transport: every message is a POST to the endpoint with
`Accept: application/json, text/event-stream`; the answer is one JSON message (or a
batch), an SSE stream of messages ending with the response, or 202 for a notification.

Speaking 2026-07-28, every POST carries `MCP-Protocol-Version` and mirrors its method and
target (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`: `tether.daemon.mcp.headers`); there is no
session. Speaking 2025-11-25, the session id the server gives in `Mcp-Session-Id` at
`initialize` goes with every later request, and `MCP-Protocol-Version` once negotiated;
closing sends DELETE for the session, best-effort. tether does not open the optional GET
stream (it asks the server for nothing unprompted).

The connection ends — `serve` raises, and the pool opens a new one — when the server cannot
be reached (McpNotDelivered: the message never left), when it rejects the session (a 404,
or a 400 whose body names the session, for a request carrying one: McpSessionLost, the
message was not processed), or when the exchange breaks mid-way (McpUnavailable: the
message may have been acted on). A message sent after that fails with McpNotDelivered.

An error status whose body is a JSON-RPC error answering the request is delivered like any
answer (a 2026-07-28 server's 400 for an unsupported revision is one); any other error
status raises McpHttpStatus.
"""

import contextlib
from collections.abc import Mapping
from typing import Literal, cast
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec
import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.mcp.client import MODERN_VERSIONS, Deliver, Route
from tether.daemon.mcp.errors import (
    McpError,
    McpHttpStatus,
    McpNotDelivered,
    McpProtocolError,
    McpSessionLost,
    McpUnavailable,
)
from tether.daemon.mcp.headers import header_value

log = get_logger(__name__)

ACCEPT = "application/json, text/event-stream"


def shown_url(url: str) -> str:
    """`url` without its user info and query (`https://host:8080/mcp`), for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    query = "?…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query


class HttpTransport:
    kind: Literal["stdio", "http"] = "http"

    def __init__(
        self, url: str, headers: Mapping[str, str], *, name: str, client: httpx.AsyncClient
    ) -> None:
        self.url = url
        self.shown_url = shown_url(url)
        """The URL as messages and the log name it: a password or a query (where a token
        may ride) left out."""
        self.headers = dict(headers)
        self.name = name
        self.client = client
        self.session_id = ""
        self.version = ""
        self._ended = trio.Event()
        self._end_reason: McpError | None = None

    def negotiated(self, version: str) -> None:
        self.version = version

    @property
    def modern(self) -> bool:
        return self.version in MODERN_VERSIONS

    def _headers(self, route: Route | None = None) -> dict[str, str]:
        headers = {
            **self.headers,
            "Accept": ACCEPT,
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        if self.modern and route is not None:
            headers["Mcp-Method"] = route.method
            if route.name:
                headers["Mcp-Name"] = header_value(route.name)
            headers.update(route.params)
        return headers

    async def send(self, message: bytes, deliver: Deliver, route: Route | None = None) -> None:
        """POST one message and hand what the answer carries to `deliver`. A lost connection
        or a rejected session ends the transport (see the module); McpNotDelivered says the
        server never took the message."""
        if self._ended.is_set():
            raise McpNotDelivered(f"MCP server {self.name}: the connection was lost")
        try:
            async with self.client.stream(
                "POST", self.url, content=message, headers=self._headers(route)
            ) as response:
                if response.status_code in (400, 404) and self.session_id:
                    body = await response.aread()
                    if response.status_code == 404 or b"session" in body.lower():
                        self.session_id = ""  # gone at the server: nothing to DELETE
                        said = body[:200].decode("utf-8", "replace")
                        raise self._end(
                            McpSessionLost(
                                f"MCP server {self.name} no longer knows tether's session "
                                f"(HTTP {response.status_code}: {said})"
                            )
                        )
                if response.status_code >= 400:
                    body = await response.aread()
                    if (answer := _error_answer(body)) is not None:
                        deliver(answer)
                        return
                    raise McpHttpStatus(
                        f"MCP server {self.name} answered HTTP {response.status_code}: "
                        + body[:300].decode("utf-8", "replace"),
                        response.status_code,
                    )
                sid = response.headers.get("mcp-session-id")
                if sid and not self.session_id and not self.modern:
                    self.session_id = sid
                kind = response.headers.get("content-type", "").split(";")[0].strip()
                if response.status_code == 202 or not kind:
                    return
                if kind == "application/json":
                    body = await response.aread()
                    if body.strip():  # an acknowledged notification may come back empty
                        deliver(_decode(body))
                elif kind == "text/event-stream":
                    await _read_events(response, deliver)
                else:
                    raise McpProtocolError(f"an answer of type {kind!r}")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._end(
                McpNotDelivered(
                    f"MCP server {self.name} at {self.shown_url} is unreachable: {exc!r}"
                )
            ) from exc
        except httpx.HTTPError as exc:
            raise self._end(
                McpUnavailable(
                    f"MCP server {self.name} at {self.shown_url}: the connection was lost ({exc!r})"
                )
            ) from exc

    def _end(self, reason: McpError) -> McpError:
        """End the connection for `reason` (the first one stands), which is returned."""
        if not self._ended.is_set():
            self._end_reason = reason
            self._ended.set()
        return reason

    async def serve(self, deliver: Deliver) -> None:
        await self._ended.wait()
        if self._end_reason is not None:
            raise self._end_reason

    async def close(self) -> None:
        """End the session at the server (best-effort, at most 2 s). Shielded."""
        if not self.session_id:
            return
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(2.0),
            contextlib.suppress(httpx.HTTPError),
        ):
            await self.client.delete(self.url, headers=self._headers())


def _error_answer(body: bytes) -> object | None:
    """The JSON-RPC error response an error status carries, if it answers a request (has
    an id); None otherwise (no body, not JSON, or an error about no request in particular)."""
    try:
        answer: object = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(answer, dict):
        return None
    fields = cast("dict[str, object]", answer)
    if isinstance(fields.get("error"), dict) and fields.get("id") is not None:
        return fields
    return None


def _decode(data: bytes) -> object:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise McpProtocolError(f"an answer that is not JSON: {data[:200]!r}") from exc


async def _read_events(response: httpx.Response, deliver: Deliver) -> None:
    """Each SSE event's data is one JSON-RPC message; comments, other fields and events
    with empty data (the priming event a server may send first, with only an id) are
    skipped."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            _deliver_event(data, deliver)
            data = []
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    _deliver_event(data, deliver)


def _deliver_event(data: list[str], deliver: Deliver) -> None:
    text = "\n".join(data)
    if text.strip():
        deliver(_decode(text.encode()))
