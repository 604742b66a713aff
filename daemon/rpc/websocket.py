"""The daemon's websocket server: RFC 6455 over trio's TCP streams, with wsproto (sans-IO, its
public API only) doing the handshake and reading what clients send.

Rules:
- at most `max_pending` connections wait for their handshake at once; one more drops the
  oldest of them (its socket is closed: that client sees EOF), so a flood of connections that
  never finish their handshake holds at most `max_pending` descriptors and never delays the
  clients that do finish;
- the upgrade request must arrive within `handshake_timeout`; `check(request)` then accepts it
  (None) or refuses it with an HTTP status and a text body. A request that is not a websocket
  upgrade at all gets 400;
- one task reads (`receive`); any number may send, one write at a time (a lock);
- pings from the client are answered while reading; a close frame is answered and ends
  `receive` with `ConnectionClosed`, as does EOF;
- a message larger than `max_message_size` closes the connection with 1009, one that is not
  UTF-8 text or not well framed with 1007/1002 (wsproto's codes).

Frames the daemon sends are text frames built here: a 2-10 byte header, then the payload as is
(RFC 6455 §5.2; a server never masks and no extension is negotiated). So an event frame, encoded
once and shared by every subscriber, reaches each socket without being decoded, re-encoded or
copied per client. Control frames (ping, pong, close) and the handshake answer are wsproto's.

`write_nowait` writes a text frame from synchronous code (an event being emitted) when no send
is under way and the socket takes it without waiting; what the socket did not take is written
first by the next send. It is the outbox's direct path (see `tether.daemon.rpc.outbox`).
"""

import contextlib
import itertools
import os
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Sequence

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from tether.daemon.logs.log import get_logger

log = get_logger(__name__)

RECEIVE_CHUNK = 64 * 1024
CLOSE_TIMEOUT = 2.0
"""Seconds `aclose` waits for the client to answer a close frame."""

_MESSAGE_TOO_BIG = 1009
_NOT_AN_UPGRADE = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 34\r\nConnection: close\r\n\r\nexpected a websocket upgrade (GET)\n"
)

MAX_PENDING_HANDSHAKES = 64
"""Connections waiting for their handshake at once, by default."""

Check = Callable[[Request], tuple[int, str] | None]
Handler = Callable[["WebSocket"], Awaitable[None]]


class ConnectionClosed(Exception):
    """The websocket is closed: `code` is the close code (None when no close frame came)."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"websocket closed (code={code}){': ' + reason if reason else ''}")
        self.code = code
        self.reason = reason


def text_frame_header(length: int) -> bytes:
    """The header of an unmasked, final text frame carrying `length` payload bytes."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, length)
    return struct.pack("!BBQ", 0x81, 127, length)


class WebSocket:
    """One accepted websocket. `request` is the client's upgrade request (Host, headers)."""

    def __init__(
        self,
        stream: trio.SocketStream,
        ws: WSConnection,
        request: Request,
        *,
        max_message_size: int,
    ) -> None:
        self.request = request
        self._stream = stream
        self._ws = ws
        self._max_message_size = max_message_size
        self._send_lock = trio.Lock()
        self._messages: deque[str | bytes] = deque()
        self._text: list[str] = []
        self._bytes: list[bytes] = []
        self._part_bytes = 0
        self._pong = trio.Event()
        self._closed = trio.Event()
        self._unsent = b""
        """The rest of a frame `write_nowait` wrote in part; the next send writes it first."""
        self._closing: tuple[int, str] | None = None
        """The code and reason of the close frame `receive` sent, while it waits for the answer."""
        self.closed: ConnectionClosed | None = None
        """Why the websocket is over, once it is."""

    @property
    def peer(self) -> str:
        """The client's address, `host:port` (empty once the socket is gone)."""
        return _peer(self._stream)

    @property
    def max_message_size(self) -> int:
        """The largest message `receive` takes (a larger one closes with 1009)."""
        return self._max_message_size

    async def receive(self) -> str | bytes:
        """The next whole message. Raises `ConnectionClosed` once the websocket is over."""
        while not self._messages:
            if self.closed is not None:
                raise ConnectionClosed(self.closed.code, self.closed.reason)
            data = b""
            # Once we have sent a close frame, the client has CLOSE_TIMEOUT to answer it.
            with trio.move_on_after(CLOSE_TIMEOUT if self._closing else float("inf")):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    data = await self._stream.receive_some(RECEIVE_CHUNK)
            if self.closed is None and data:
                self._ws.receive_data(data)
            elif self.closed is None:
                self._finish(*(self._closing or (None, "the connection was lost")))
                await trio.aclose_forcefully(self._stream)
            for event in self._ws.events():
                await self._handle(event)
        return self._messages.popleft()

    async def send_text_frames(self, payloads: Sequence[bytes]) -> None:
        """Send each payload (UTF-8 JSON) as one text message, all in one write.

        Raises `ConnectionClosed` when the websocket is closed or the write fails. Cancelling
        it may leave a frame half written; the connection is then closed, not reused.
        """
        self._check_open()
        parts: list[bytes] = []
        for payload in payloads:
            parts.append(text_frame_header(len(payload)))
            parts.append(payload)
        await self._send(b"".join(parts))

    def write_nowait(self, payload: bytes) -> bool:
        """Write `payload` as one text message now, without waiting: True when the socket took
        it (all of it, or a part: the rest is `has_unsent` and goes out with the next send),
        False when nothing was written (a send is under way, the socket is full, the websocket
        is closing or closed, or the write failed: the caller queues the frame instead, and a
        broken connection is then found by the queued send)."""
        if (
            self.closed is not None
            or self._closing is not None
            or self._unsent
            or self._send_lock.locked()
            or self._ws.state is not ConnectionState.OPEN
        ):
            return False
        fd = self._stream.socket.fileno()
        if fd < 0:
            return False
        header = text_frame_header(len(payload))
        try:
            sent = os.writev(fd, (header, payload))
        except OSError:
            return False
        if sent < len(header) + len(payload):
            self._unsent = (header + payload)[sent:]
        return True

    @property
    def has_unsent(self) -> bool:
        return bool(self._unsent)

    async def ping(self) -> None:
        """Send a ping and wait for the pong (cancel it to give up)."""
        self._check_open()
        self._pong = trio.Event()
        await self._send(self._ws.send(Ping(payload=b"tether")))
        await self._pong.wait()

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Close: send a close frame and wait (at most `CLOSE_TIMEOUT`) for the answer, which
        the reading task receives; then close the TCP stream. A client that does not read (a
        write is stuck behind it) is cut off at once, without a close frame."""
        if self.closed is None and not self._send_lock.locked():
            with trio.move_on_after(CLOSE_TIMEOUT):
                try:
                    await self._send(self._ws.send(CloseConnection(code=code, reason=reason)))
                    await self._closed.wait()
                except ConnectionClosed:
                    pass
        self._finish(code, reason)
        await trio.aclose_forcefully(self._stream)

    def _check_open(self) -> None:
        if self.closed is not None:
            raise ConnectionClosed(self.closed.code, self.closed.reason)
        if self._ws.state is not ConnectionState.OPEN:
            raise ConnectionClosed(None, "closing")

    async def _send(self, data: bytes) -> None:
        """Write bytes wsproto (or `send_text_frames`) produced; wsproto has already checked the
        state for its own frames."""
        if self.closed is not None:
            raise ConnectionClosed(self.closed.code, self.closed.reason)
        async with self._send_lock:
            if self._unsent:
                data, self._unsent = self._unsent + data, b""
            if not data:
                return
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._finish(None, "the connection broke")
                raise ConnectionClosed(None, "the connection broke") from exc

    async def _handle(self, event: object) -> None:
        match event:
            case TextMessage() | BytesMessage() if self._closing:
                pass  # what a client sends after our close frame is not read
            case TextMessage():
                self._text.append(event.data)
                await self._grow(len(event.data))
                if event.message_finished and not self._closing:
                    self._messages.append("".join(self._text))
                    self._text.clear()
                    self._part_bytes = 0
            case BytesMessage():
                self._bytes.append(bytes(event.data))
                await self._grow(len(event.data))
                if event.message_finished and not self._closing:
                    self._messages.append(b"".join(self._bytes))
                    self._bytes.clear()
                    self._part_bytes = 0
            case Ping() if self._ws.state is ConnectionState.OPEN:
                await self._send_quietly(self._ws.send(event.response()))
            case Pong():
                self._pong.set()
            case CloseConnection(code=code, reason=reason):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    await self._send_quietly(self._ws.send(event.response()))
                elif self._ws.state is ConnectionState.OPEN:
                    # wsproto could not parse the client's frames: say why, and stop reading.
                    self._closing = (code, reason or "protocol error")
                    await self._send_quietly(self._ws.send(event))
                self._finish(*(self._closing or (code, reason or "")))
                await trio.aclose_forcefully(self._stream)
            case _:
                pass

    async def _grow(self, size: int) -> None:
        # Text is counted in characters, at most its size in bytes.
        self._part_bytes += size
        if self._part_bytes > self._max_message_size:
            self._text.clear()
            self._bytes.clear()
            await self._close_for(_MESSAGE_TOO_BIG, "message too big")

    async def _close_for(self, code: int, reason: str) -> None:
        """Send a close frame from the reading task; `receive` then waits for the answer."""
        self._closing = (code, reason)
        if self._ws.state is ConnectionState.OPEN:
            await self._send_quietly(self._ws.send(CloseConnection(code=code, reason=reason)))

    async def _send_quietly(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._send(data)

    def _finish(self, code: int | None, reason: str) -> None:
        if self.closed is None:
            self.closed = ConnectionClosed(code, reason)
        self._closed.set()


async def _handshake(
    stream: trio.SocketStream, check: Check, max_message_size: int
) -> WebSocket | None:
    ws = WSConnection(ConnectionType.SERVER)
    while True:
        data = await stream.receive_some(RECEIVE_CHUNK)
        try:
            ws.receive_data(data or None)
        except RemoteProtocolError:
            await stream.send_all(_NOT_AN_UPGRADE)
            return None
        for event in ws.events():
            if isinstance(event, Request):
                refusal = check(event)
                if refusal is not None:
                    status, reason = refusal
                    # The reason says what was wrong, never the token or headers sent.
                    log.warning(
                        "websocket upgrade refused",
                        peer=_peer(stream),
                        status=status,
                        reason=reason,
                        user_agent=_header(event, b"user-agent"),
                    )
                    body = reason.encode()
                    headers = [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ]
                    answer = ws.send(
                        RejectConnection(status_code=status, headers=headers, has_body=True)
                    )
                    answer += ws.send(RejectData(data=body, body_finished=True))
                    await stream.send_all(answer)
                    return None
                await stream.send_all(ws.send(AcceptConnection()))
                return WebSocket(stream, ws, event, max_message_size=max_message_size)
        if not data:
            return None


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return ""
    return f"{host}:{port}"


def _header(request: Request, name: bytes) -> str:
    for key, value in request.extra_headers:
        if key.lower() == name:
            return bytes(value).decode(errors="replace")[:200]
    return ""


class PendingHandshakes:
    """The connections that have not finished their handshake, oldest first: at most `limit`
    of them; admitting one more cancels the oldest (`dropped` counts them)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"at least one pending handshake must be allowed, not {limit}")
        self.limit = limit
        self.dropped = 0
        self._scopes: dict[int, trio.CancelScope] = {}
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._scopes)

    @contextlib.contextmanager
    def admitted(self) -> Generator[trio.CancelScope]:
        """A cancel scope for one handshake, cancelled should `limit` newer ones arrive before
        it is done; enter it around the handshake. Left when the handshake is over."""
        while len(self._scopes) >= self.limit:
            oldest = next(iter(self._scopes))
            self._scopes.pop(oldest).cancel()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "too many pending websocket handshakes; oldest dropped",
                    limit=self.limit,
                    dropped=self.dropped,
                )
        key = next(self._ids)
        scope = trio.CancelScope()
        self._scopes[key] = scope
        try:
            yield scope
        finally:
            self._scopes.pop(key, None)


async def serve_websocket(
    handler: Handler,
    host: str,
    port: int,
    *,
    check: Check,
    max_message_size: int,
    handshake_timeout: float = 10.0,
    max_pending: int = MAX_PENDING_HANDSHAKES,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on host:port (0: any free port, reported through `task_status`) and run
    `handler(ws)` for each accepted websocket, in a task of its own. When the handler returns
    the TCP stream is closed. A handler's exception is logged; it never stops the server. At
    most `max_pending` connections wait for their handshake (see the module's rules).
    Cancelling this closes the listener and every connection."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    pending = PendingHandshakes(max_pending)

    async def serve_one(stream: trio.SocketStream) -> None:
        ws: WebSocket | None = None
        try:
            with pending.admitted() as scope, scope, trio.move_on_after(handshake_timeout):
                ws = await _handshake(stream, check, max_message_size)
            if ws is not None:
                await handler(ws)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away during the handshake
        except Exception:
            log.exception("websocket connection failed")
        finally:
            await trio.aclose_forcefully(stream)

    sockname = listeners[0].socket.getsockname()
    task_status.started(int(sockname[1]))
    await trio.serve_listeners(serve_one, listeners)
