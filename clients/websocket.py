"""A small synchronous websocket client for the thin CLI.

It speaks RFC 6455 through ``wsproto`` (sans-IO) over a plain blocking ``socket``. Only the
standard library and ``wsproto`` are imported, so ``tether`` starts fast.

Usage::

    with WebSocket.connect("127.0.0.1", port, headers={"Authorization": "Bearer ..."}) as ws:
        ws.send('{"jsonrpc": "2.0", ...}')
        reply = ws.recv(timeout=5.0)

``recv()`` returns complete messages as UTF-8 bytes. Everything read from the socket is kept
between calls: a ``TimeoutError`` never drops a partial message, and several messages that
arrive in one read are queued and returned one by one. Pings are answered automatically while
reading. Not thread-safe: use one ``WebSocket`` from one thread.
"""

import socket
import time
from collections import deque
from types import TracebackType
from typing import Self

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

__all__ = ["ConnectionClosed", "HandshakeRejected", "WebSocket", "WebSocketError"]

_CHUNK = 64 * 1024
"""Bytes asked of the socket per read."""

CLOSE_TIMEOUT = 2.0
"""Seconds ``close()`` waits for the peer to answer the close frame."""

# Close codes that never travel in a close frame; they mean "no code was received".
_NO_STATUS_RCVD = 1005
_ABNORMAL_CLOSURE = 1006


class WebSocketError(Exception):
    """Base class for every error this module raises (besides ``OSError``/``TimeoutError``)."""


class HandshakeRejected(WebSocketError):
    """The server answered the upgrade request with an ordinary HTTP response."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        detail = body[:200].decode("utf-8", "replace").strip()
        message = f"websocket handshake rejected with HTTP {status}"
        super().__init__(f"{message}: {detail}" if detail else message)


class ConnectionClosed(WebSocketError):
    """The connection is closed (by the peer, by us, or because the transport broke).

    ``code`` is the close code the peer sent, the code we closed with, or ``None`` when no close
    code was exchanged (the TCP connection dropped, or the close frame carried no code).
    """

    def __init__(self, code: int | None, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"websocket closed (code={code}){': ' + reason if reason else ''}")


class WebSocket:
    """A connected client websocket. Create one with :meth:`connect`."""

    def __init__(self, sock: socket.socket, ws: WSConnection, send_timeout: float) -> None:
        # Use connect(); this constructor takes an already-upgraded (or upgrading) connection.
        self._sock = sock
        self._ws = ws
        self._send_timeout = send_timeout
        self._messages: deque[bytes] = deque()
        self._text_parts: list[str] = []
        self._bytes_parts: list[bytes | bytearray] = []
        self._eof = False
        self._eof_detail = ""
        self._closed: ConnectionClosed | None = None  # set once the connection is over
        self._sock_open = True

    # ------------------------------------------------------------------ connect

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        *,
        path: str = "/",
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> "WebSocket":
        """Open a TCP connection and perform the websocket upgrade.

        ``timeout`` bounds the TCP connect plus the handshake, and later each ``send()``.
        Raises ``HandshakeRejected`` when the server refuses the upgrade, ``TimeoutError`` when
        it does not answer in time, ``OSError`` (e.g. ``ConnectionRefusedError``) when the TCP
        connection fails and ``WebSocketError`` for a malformed handshake response.
        """
        deadline = time.monotonic() + timeout
        extra = [
            (name.encode("ascii"), value.encode("latin-1"))
            for name, value in (headers or {}).items()
        ]
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        ws = WSConnection(ConnectionType.CLIENT)
        # Build the request before opening the socket: invalid headers fail without a leak.
        request = ws.send(Request(host=authority, target=path, extra_headers=extra))
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request)
            conn = cls(sock, ws, timeout)
            conn._handshake(deadline)
        except BaseException:
            sock.close()
            raise
        return conn

    def _handshake(self, deadline: float) -> None:
        reject: RejectConnection | None = None
        body = bytearray()
        while True:
            data = self._recv_chunk(deadline)
            try:
                self._ws.receive_data(data or None)
            except RemoteProtocolError as exc:
                raise WebSocketError(f"invalid websocket handshake response: {exc}") from exc
            accepted = False
            for event in self._ws.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
                elif isinstance(event, RejectConnection):
                    reject = event
                    if not event.has_body:
                        raise HandshakeRejected(event.status_code, b"")
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished and reject is not None:
                        raise HandshakeRejected(reject.status_code, bytes(body))
                else:
                    # Frames the server sent right behind its 101 response.
                    self._handle_event(event)
            if accepted:
                return
            if not data:
                if reject is not None:
                    raise HandshakeRejected(reject.status_code, bytes(body))
                raise WebSocketError("connection closed during the websocket handshake")

    # --------------------------------------------------------------- public API

    @property
    def pending(self) -> int:
        """Complete messages already read from the socket; ``recv()`` returns them at once."""
        return len(self._messages)

    def fileno(self) -> int:
        """The socket's file descriptor (``-1`` once closed), for ``select``/``selectors``.

        Check :attr:`pending` first: buffered messages do not make the socket readable.
        """
        return self._sock.fileno()

    def send(self, message: str | bytes) -> None:
        """Send one TEXT message; ``bytes`` must be UTF-8 (e.g. encoded JSON).

        Raises ``ConnectionClosed`` if the connection is (or becomes) closed; a send that does not
        complete within the connect timeout aborts the connection the same way.
        """
        text = message.decode("utf-8") if isinstance(message, bytes) else message
        if self._closed is not None:
            raise self._closed_error()
        if self._ws.state is not ConnectionState.OPEN:
            raise ConnectionClosed(None, "close handshake in progress")
        self._send_raw(self._ws.send(TextMessage(data=text)))
        if self._closed is not None:
            raise self._closed_error()

    def recv(self, timeout: float | None = None) -> bytes:
        """Return the next complete message (text as UTF-8 bytes; binary as is).

        Blocks forever with ``timeout=None``. Raises ``TimeoutError`` if no complete message
        arrives in time (partial data is kept for the next call) and ``ConnectionClosed`` once
        the connection is closed and every message received before the close was returned.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._messages:
            if self._closed is not None:
                raise self._closed_error()
            data = self._recv_chunk(deadline)
            self._feed(data)
        return self._messages.popleft()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Run the close handshake (waiting at most ``CLOSE_TIMEOUT``) and close the socket.

        Idempotent, and never raises for a connection that is already broken.
        """
        if not self._sock_open:
            return
        try:
            if self._ws.state is ConnectionState.OPEN:
                self._send_raw(self._ws.send(CloseConnection(code=code, reason=reason or None)))
                deadline = time.monotonic() + CLOSE_TIMEOUT
                # The peer's close reply (or EOF) ends in _finish(), which closes the socket.
                while self._sock_open:
                    self._feed(self._recv_chunk(deadline))
        except (OSError, WebSocketError):
            pass  # the peer is gone or slow; closing the socket is all that is left to do
        finally:
            self._finish(code, reason)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None else self._ws.state.name.lower()
        return f"<WebSocket fd={self.fileno()} {state}>"

    # ---------------------------------------------------------------- internals

    def _recv_chunk(self, deadline: float | None) -> bytes:
        """One socket read; ``b""`` means EOF. Raises ``TimeoutError`` past ``deadline``.

        Past the deadline the socket is still polled without blocking, so data that is already
        there is consumed rather than reported as a timeout.
        """
        if deadline is None:
            self._sock.settimeout(None)
        else:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.0))
        try:
            return self._sock.recv(_CHUNK)
        except (TimeoutError, BlockingIOError):
            raise TimeoutError("timed out waiting for a websocket message") from None
        except OSError as exc:
            # Reset, broken pipe, ...: the same as EOF for our purposes.
            self._eof_detail = str(exc)
            return b""

    def _feed(self, data: bytes) -> None:
        """Hand bytes (``b""`` = EOF) to wsproto and act on the resulting events."""
        if not data:
            self._eof = True
            self._ws.receive_data(None)  # yields CloseConnection(1006)
        else:
            self._ws.receive_data(data)
        for event in self._ws.events():
            self._handle_event(event)

    def _handle_event(self, event: Event) -> None:
        if isinstance(event, TextMessage):
            self._text_parts.append(event.data)
            if event.message_finished:
                self._messages.append("".join(self._text_parts).encode("utf-8"))
                self._text_parts.clear()
        elif isinstance(event, BytesMessage):
            self._bytes_parts.append(event.data)
            if event.message_finished:
                self._messages.append(b"".join(self._bytes_parts))
                self._bytes_parts.clear()
        elif isinstance(event, Ping):
            if self._ws.state is ConnectionState.OPEN:
                self._send_raw(self._ws.send(event.response()))
        elif isinstance(event, CloseConnection):
            self._handle_close(event)
        # Pong (we never ping) and anything else: nothing to do.

    def _handle_close(self, event: CloseConnection) -> None:
        state = self._ws.state
        code: int | None = int(event.code)
        reason = event.reason or ""
        if code in (_NO_STATUS_RCVD, _ABNORMAL_CLOSURE):
            code = None
        if self._eof and code is None:
            reason = reason or self._eof_detail or "connection lost"
        if state is ConnectionState.REMOTE_CLOSING:
            # The peer started the close: echo its code, as RFC 6455 asks.
            self._send_raw(self._ws.send(event.response()))
        elif state is ConnectionState.OPEN:
            # wsproto could not parse the peer's frames: tell it why, then give up.
            self._send_raw(self._ws.send(CloseConnection(code=int(event.code), reason=reason)))
            code = int(event.code)
            reason = f"protocol error: {reason}"
        self._finish(code, reason)

    def _send_raw(self, data: bytes | bytearray) -> None:
        if not self._sock_open:
            return
        self._sock.settimeout(self._send_timeout)
        try:
            self._sock.sendall(data)
        except OSError as exc:
            # Includes TimeoutError: a frame may be half written, so the stream is unusable.
            self._finish(None, f"send failed: {exc}")

    def _closed_error(self) -> ConnectionClosed:
        # A fresh exception per raise, so tracebacks do not pile up on one shared instance.
        assert self._closed is not None
        return ConnectionClosed(self._closed.code, self._closed.reason)

    def _finish(self, code: int | None, reason: str) -> None:
        """Record why the connection is over (first reason wins) and close the socket."""
        if self._closed is None:
            self._closed = ConnectionClosed(code, reason)
        if self._sock_open:
            self._sock_open = False
            self._sock.close()
