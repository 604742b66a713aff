"""`/ws/daemon/<id>`: one page websocket relayed to one connection of its own to a daemon.

Both ends speak RFC 6455 the same way: the page is a client (it masks its frames), the daemon a
server (it does not), no extension is negotiated on either side. So once both handshakes are
done the relay passes bytes, not messages: what the page sends reaches the daemon as sent, and
back, with no decoding, copying into messages or re-framing, and pings and close frames go end
to end (the daemon's pings find a page that went away; the page's close reaches the daemon).
The relay reads only each frame's header, to know where frames begin (`FrameCursor`), so that
it can close a side cleanly when the other goes away without a word.

Rules:
- the daemon connection is opened with the daemon's token, which the page never sees; its
  handshake offers no extension, and the page's handshake is answered with none;
- backpressure flows through: each direction is one task that reads a chunk and awaits its
  write before reading the next, so a page that reads slowly stops the relay reading from the
  daemon (whose bounded queue then resyncs that client, and nobody else), and the reverse;
- closing either side closes the other: a close frame passes through and the close handshake
  runs end to end; a daemon that drops the connection without one closes the page with 1011
  `LOST_DAEMON`, and a page that drops it closes the daemon connection with 1001 `PAGE_LEFT`
  (each sent between frames; in the middle of one, the connection is only cut).
"""

import base64
import contextlib
import hashlib
import os
import struct

import h11
import trio

from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.transport import HOST

LOST_DAEMON = "lost the connection to the workspace's daemon"
PAGE_LEFT = "the page went away"
CHUNK = 64 * 1024
HANDSHAKE_TIMEOUT = 5.0
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CLOSE = 0x8


class HandshakeFailed(Exception):
    """The daemon refused or botched the websocket handshake."""


def accept_key(key: bytes) -> bytes:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.strip() + _GUID).digest())


def close_frame(code: int, reason: str, *, masked: bool) -> bytes:
    """A close frame with `code` and `reason` (cut to fit 125 bytes), masked as a client's."""
    payload = struct.pack("!H", code) + reason.encode()[:123].decode(errors="ignore").encode()
    if not masked:
        return bytes((0x80 | _CLOSE, len(payload))) + payload
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | _CLOSE, 0x80 | len(payload))) + mask + body


class FrameCursor:
    """Where a stream of websocket frames is, fed the bytes as they pass: inside a frame's
    header, inside its payload, or between two frames; and whether a close frame has begun."""

    __slots__ = ("_head", "_left", "closing")

    def __init__(self) -> None:
        self._head = bytearray()
        self._left = 0
        self.closing = False

    @property
    def between_frames(self) -> bool:
        return self._left == 0 and not self._head

    def feed(self, data: bytes | bytearray) -> None:
        at, end = 0, len(data)
        while at < end:
            if self._left:
                step = min(self._left, end - at)
                self._left -= step
                at += step
                continue
            # A header is 2 to 14 bytes: taken a byte at a time, it is a few steps a frame.
            self._head.append(data[at])
            at += 1
            need = _header_size(self._head)
            if need is not None and len(self._head) == need:
                self._left = _payload_length(self._head)
                if self._head[0] & 0x0F == _CLOSE:
                    self.closing = True
                self._head.clear()


def _header_size(head: bytearray) -> int | None:
    if len(head) < 2:
        return None
    length = head[1] & 0x7F
    return 2 + (4 if head[1] & 0x80 else 0) + (2 if length == 126 else 8 if length == 127 else 0)


def _payload_length(head: bytearray) -> int:
    length = head[1] & 0x7F
    if length == 126:
        return int(struct.unpack_from("!H", head, 2)[0])
    if length == 127:
        return int(struct.unpack_from("!Q", head, 2)[0])
    return length


async def open_daemon(info: DiscoveryInfo) -> tuple[trio.SocketStream, bytes]:
    """A websocket to the daemon `info` describes, handshake done with its token: the stream
    and what the daemon sent after its answer. Raises `HandshakeFailed` (or OSError when
    nothing listens); the stream is closed then."""
    stream = await trio.open_tcp_stream(HOST, info.port)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            return stream, await _client_handshake(stream, info)
    except BaseException as exc:
        await trio.aclose_forcefully(stream)
        if isinstance(exc, trio.TooSlowError | h11.ProtocolError | trio.BrokenResourceError):
            raise HandshakeFailed(f"the daemon did not complete the handshake: {exc}") from exc
        raise


async def _client_handshake(stream: trio.SocketStream, info: DiscoveryInfo) -> bytes:
    key = base64.b64encode(os.urandom(16))
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target="/",
        headers=[
            (b"host", f"{HOST}:{info.port}".encode()),
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-key", key),
            (b"sec-websocket-version", b"13"),
            (b"authorization", f"Bearer {info.token}".encode()),
        ],
    )
    await stream.send_all((conn.send(request) or b"") + (conn.send(h11.EndOfMessage()) or b""))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(CHUNK)))
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            accepted = dict(event.headers).get(b"sec-websocket-accept", b"")
            if accepted != accept_key(key):
                raise HandshakeFailed("the daemon answered the handshake with a wrong key")
            return bytes(conn.trailing_data[0])
        if isinstance(event, h11.Response):
            raise HandshakeFailed(f"the daemon refused the connection ({event.status_code})")
        if isinstance(event, h11.ConnectionClosed):
            raise HandshakeFailed("the daemon closed the connection during the handshake")


async def relay(
    page: trio.abc.Stream,
    page_early: bytes,
    daemon: trio.abc.Stream,
    daemon_early: bytes,
) -> None:
    """Pass bytes between `page` and `daemon` (both past their handshakes; `*_early` is what
    each sent beyond it) until either side's connection ends, then end the other's (see the
    module's rules). Both streams are closed when it returns, or is cancelled."""
    try:
        await _pipes(page, page_early, daemon, daemon_early)
    finally:
        await trio.aclose_forcefully(page)
        await trio.aclose_forcefully(daemon)


async def _pipes(
    page: trio.abc.Stream, page_early: bytes, daemon: trio.abc.Stream, daemon_early: bytes
) -> None:
    upstream, downstream = FrameCursor(), FrameCursor()
    async with trio.open_nursery() as nursery:

        async def pipe(
            source: trio.abc.Stream,
            sink: trio.abc.Stream,
            early: bytes,
            cursor: FrameCursor,
            farewell: bytes,
        ) -> None:
            data: bytes | bytearray = early
            try:
                while True:
                    if data:
                        cursor.feed(data)
                        await sink.send_all(data)
                    data = await source.receive_some(CHUNK)
                    if not data:
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            # The source is gone. Unless it said goodbye itself, tell the sink why, between
            # two frames (a close frame in the middle of one would only corrupt it).
            if not cursor.closing and cursor.between_frames:
                with trio.move_on_after(1):
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await sink.send_all(farewell)
            nursery.cancel_scope.cancel()

        nursery.start_soon(
            pipe, page, daemon, page_early, upstream, close_frame(1001, PAGE_LEFT, masked=True)
        )
        nursery.start_soon(
            pipe,
            daemon,
            page,
            daemon_early,
            downstream,
            close_frame(1011, LOST_DAEMON, masked=False),
        )
