"""HTTP/1.1 for `tether web`, on h11 (sans-IO): reading a request within limits, answering it
with the security headers every answer carries, and handing a websocket upgrade over to
trio-websocket.

Limits: a request head larger than `MAX_HEAD_BYTES` is refused (431), a body larger than
`MAX_BODY_BYTES` too (413); a head must arrive within `HEAD_TIMEOUT` seconds of the connection
or of the previous answer (a keep-alive connection idle longer is closed), and its body within
as long again (408).

A websocket upgrade is read by h11 like any request, so that Host, Origin and the cookie are
checked, and the route chosen, before anything websocket happens. The overview's is then
accepted by trio-websocket: the request head is written back out (`request_bytes`) and
replayed, with whatever followed it, through `ReplayStream`, so that wsproto parses the same
request and answers the handshake itself. The relay answers its own (`tether.clients.web.relay`).
"""

from http import HTTPStatus

import h11
import trio
import trio.abc

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
HEAD_TIMEOUT = 10.0
RECEIVE_BYTES = 64 * 1024

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
"""Sent with every answer: a page of ours runs only its own scripts and styles, talks only to
this server, and may not be framed; nothing is sniffed and no referrer leaves."""


class TooLarge(Exception):
    """The request's head or body is over its limit (`status` 431 or 413), or too slow (408)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Incoming:
    """One HTTP connection being read: h11's state and the stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

    async def next_event(self) -> h11.Event | type[h11.PAUSED]:
        """h11's next event, reading as needed. Raises `h11.RemoteProtocolError` (a malformed
        or oversized head: its `error_status_hint` is the status to answer)."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event  # pyright: ignore[reportReturnType]
            try:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self.h11.receive_data(bytes(data))

    async def read_body(self) -> bytes:
        """The request's body (up to `MAX_BODY_BYTES`, else `TooLarge`), read to its end."""
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY_BYTES:
                    raise TooLarge(413, f"a request body may have at most {MAX_BODY_BYTES} bytes")
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                return b"".join(parts)
            else:
                raise h11.RemoteProtocolError("the request ended early", error_status_hint=400)

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: bytes = b"text/plain; charset=utf-8",
        headers: list[tuple[bytes, bytes]] | None = None,
        cache: bytes = b"no-store",
        head_only: bool = False,
        close: bool = False,
    ) -> None:
        """Send one whole answer with the security headers. `close` ends the connection after
        it (h11 also ends it when the request asked)."""
        fields = [
            *SECURITY_HEADERS,
            (b"cache-control", cache),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ]
        if body or status >= 400:
            fields.append((b"content-type", content_type))
        if close:
            fields.append((b"connection", b"close"))
        phrase = HTTPStatus(status).phrase.encode()
        data = self.h11.send(h11.Response(status_code=status, headers=fields, reason=phrase))
        if body and not head_only:
            data = (data or b"") + (self.h11.send(h11.Data(data=body)) or b"")
        data = (data or b"") + (self.h11.send(h11.EndOfMessage()) or b"")
        await self.stream.send_all(data)

    def next_cycle(self) -> bool:
        """Get ready for the connection's next request; False when it must close instead."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False


def request_bytes(request: h11.Request) -> bytes:
    """`request`'s head as it came (h11 keeps the headers' names as sent)."""
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method, request.target)]
    lines += [b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw_items()]
    lines.append(b"\r\n")
    return b"".join(lines)


class ReplayStream(trio.abc.Stream):
    """`stream` with `prefix` read first: what the websocket library reads of a connection
    whose upgrade request h11 has already read."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        if isinstance(self._stream, trio.abc.HalfCloseableStream):
            await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()
