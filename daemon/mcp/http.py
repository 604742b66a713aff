"""The streamable HTTP transport: every message is a POST to the endpoint with
`Accept: application/json, text/event-stream`; the answer is one JSON message (or a
batch), an SSE stream of messages ending with the response, or 202 for a notification.

Speaking 2026-07-28, every POST carries `MCP-Protocol-Version` and mirrors its method and
target (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`: `tether.daemon.mcp.headers`); there is no
session. Speaking 2025-11-25, the session id the server gives in `Mcp-Session-Id` at
`initialize` goes with every later request, and `MCP-Protocol-Version` once negotiated;
closing sends DELETE for the session, best-effort. tether does not open the optional GET
stream (it asks the server for nothing unprompted).

Speaking 2025-11-25, an answer stream that breaks before the answer — the connection
reset, the body cut short, or the server ending it — after an event that carried an `id`
is resumed: a GET with `Last-Event-ID` (and the session), on which the server replays what
came after that event and then the answer. The wait before each attempt is the server's
`retry` (else RESUME_DELAY), doubled after each attempt that brought nothing new; after
RESUME_ATTEMPTS of those, or when the server refuses the GET, the request fails and the
transport ends as for any lost connection. Each message is delivered once: an answer
replayed twice is dropped. Without an event id, or speaking 2026-07-28 (which has no
resumption), a broken stream fails the request as below, and it is never sent again; a
stream the server ended cleanly before the answer fails it with McpProtocolError.

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
RESUME_ATTEMPTS = 3
"""How many attempts in a row to resume an answer stream may bring nothing new before the
request fails."""
RESUME_DELAY = 1.0
"""Seconds before the first attempt to resume, when the server named none (`retry`)."""


def shown_url(url: str) -> str:
    """`url` without its user info and query (`https://host:8080/mcp`), for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    query = "?…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query


class _Stream:
    """How far an answer stream got: the last event id the server gave (a resumption
    starts after it), the reconnection delay it asked for (`retry`, in seconds), how many
    events came, and whether the answer to the request (`awaited`, its id) did."""

    def __init__(self, awaited: object) -> None:
        self.awaited = awaited
        self.last_id = ""
        self.retry: float | None = None
        self.events = 0
        self.answered = False

    def deliver(self, data: list[str], deliver: Deliver) -> None:
        text = "\n".join(data)
        if not text.strip():
            return
        message = _decode(text.encode())
        if self.awaited is not None and _answers(message, self.awaited):
            if self.answered:
                return  # a server replaying what it sent already
            self.answered = True
        deliver(message)


def _answers(message: object, ident: object) -> bool:
    """Whether `message` is the response to the request with id `ident`."""
    if not isinstance(message, dict):
        return False
    fields = cast("dict[str, object]", message)
    return "method" not in fields and fields.get("id") == ident


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
        server never took the message. An answer stream that breaks after an event id is
        resumed (see the module) within the caller's deadline; cancelled, nothing more is
        read."""
        if self._ended.is_set():
            raise McpNotDelivered(f"MCP server {self.name}: the connection was lost")
        try:
            broken = await self._post(message, deliver, route)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._end(
                McpNotDelivered(
                    f"MCP server {self.name} at {self.shown_url} is unreachable: {exc!r}"
                )
            ) from exc
        except httpx.HTTPError as exc:
            raise self._end(self._lost(repr(exc))) from exc
        if broken is not None:
            await self._resume(*broken, deliver)

    async def _post(
        self, message: bytes, deliver: Deliver, route: Route | None
    ) -> tuple[_Stream, str] | None:
        """The POST; an answer stream broken where it can be resumed is returned with what
        broke it."""
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
                    return None
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
                return None
            if kind == "application/json":
                body = await response.aread()
                if body.strip():  # an acknowledged notification may come back empty
                    deliver(_decode(body))
                return None
            if kind != "text/event-stream":
                raise McpProtocolError(f"an answer of type {kind!r}")
            stream = _Stream(_request_id(message))
            try:
                await _read_events(response, deliver, stream)
            except httpx.HTTPError as exc:
                if stream.answered:
                    return None
                if stream.awaited is None or not stream.last_id or self.modern:
                    raise
                return stream, repr(exc)
            if stream.answered or stream.awaited is None:
                return None
            if not stream.last_id or self.modern:
                raise McpProtocolError(
                    f"MCP server {self.name} ended its answer stream before the answer, "
                    "with no event id to resume it from"
                )
            return stream, "the stream ended before the answer"

    async def _resume(self, stream: _Stream, broken: str, deliver: Deliver) -> None:
        """GET the stream again from its last event id until the answer comes: after the
        delay the server asked for (`retry`) or RESUME_DELAY, doubled after each attempt
        that brought nothing new, at most RESUME_ATTEMPTS such attempts. Ends the transport
        when it gives up: the request may have been acted on, so it is never sent again."""
        failed = 0
        while failed < RESUME_ATTEMPTS:
            delay = RESUME_DELAY if stream.retry is None else stream.retry
            await trio.sleep(delay * 2**failed)
            if self._ended.is_set():
                raise self._lost(broken, "the connection ended meanwhile")
            seen = stream.events
            log.info(
                "resuming an MCP answer stream",
                server=self.name,
                last_event_id=stream.last_id,
                broken=broken,
            )
            try:
                async with self.client.stream(
                    "GET", self.url, headers=self._resume_headers(stream.last_id)
                ) as response:
                    kind = response.headers.get("content-type", "").split(";")[0].strip()
                    if response.status_code >= 400 or kind != "text/event-stream":
                        body = await response.aread()
                        said = body[:200].decode("utf-8", "replace")
                        raise self._end(
                            self._lost(
                                broken,
                                f"the server did not resume it (HTTP {response.status_code}: "
                                f"{said})",
                            )
                        )
                    with trio.CancelScope() as answered:
                        await _read_events(response, deliver, stream, answered=answered)
                    if stream.answered:
                        return
                    broken = "the resumed stream ended before the answer"
            except httpx.HTTPError as exc:
                if stream.answered:
                    return
                broken = repr(exc)
            failed = 0 if stream.events > seen else failed + 1
        raise self._end(self._lost(broken, f"{RESUME_ATTEMPTS} attempts to resume it failed"))

    def _resume_headers(self, last_id: str) -> dict[str, str]:
        headers = {**self.headers, "Accept": "text/event-stream", "Last-Event-ID": last_id}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    def _lost(self, broken: str, why: str = "") -> McpUnavailable:
        return McpUnavailable(
            f"MCP server {self.name} at {self.shown_url}: the connection was lost ({broken})"
            + (f"; {why}" if why else "")
        )

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


def _request_id(message: bytes) -> object:
    """The id of the request `message` is (None for a notification or an answer)."""
    decoded: object = msgspec.json.decode(message)
    if not isinstance(decoded, dict):
        return None
    fields = cast("dict[str, object]", decoded)
    return fields.get("id") if "method" in fields else None


async def _read_events(
    response: httpx.Response,
    deliver: Deliver,
    stream: _Stream,
    *,
    answered: trio.CancelScope | None = None,
) -> None:
    """Each SSE event's data is one JSON-RPC message; comments, other fields and events
    with empty data (the priming event a server may send first, with only an id) are
    skipped. An event's `id` counts once the event is whole; `retry` counts at once.
    Returns at the end of the stream; `answered` is cancelled once the answer came (a
    resumed stream may stay open for more; cancelling lets httpx's readers end)."""
    data: list[str] = []
    event_id: str | None = None
    async for line in response.aiter_lines():
        if not line:
            if event_id is not None:
                stream.last_id = event_id
            if data or event_id is not None:
                stream.events += 1
            stream.deliver(data, deliver)
            if answered is not None and stream.answered:
                answered.cancel()
            data, event_id = [], None
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "id" and "\0" not in value:
            event_id = value
        elif field == "retry" and value.isdigit():
            stream.retry = int(value) / 1000
    if data:
        stream.events += 1
        stream.deliver(data, deliver)
