"""A small synchronous websocket client for the thin CLI.

It speaks RFC 6455 itself over a plain blocking ``socket``, importing only the standard
library: the client side of the protocol is small (an HTTP upgrade, masked frames out,
unmasked frames in), and a sans-IO library with an HTTP parser behind it was most of what
``tether`` imported before its first byte reached the daemon.

Usage::

    with WebSocket.connect("127.0.0.1", port, headers={"Authorization": "Bearer ..."}) as ws:
        ws.send('{"jsonrpc": "2.0", ...}')
        reply = ws.recv(timeout=5.0)

``recv()`` returns complete messages as UTF-8 bytes. Everything read from the socket is kept
between calls: a ``TimeoutError`` never drops a partial message, and several messages that
arrive in one read are queued and returned one by one. Pings are answered automatically while
reading. Not thread-safe: use one ``WebSocket`` from one thread.

What the server sends is checked as RFC 6455 asks of a client: frames must be unmasked, with no
reserved bits (no extension is offered), known opcodes, control frames whole and short,
continuations only inside a fragmented message, text valid UTF-8. A frame that breaks a rule
is answered with a close frame (1002 protocol error, 1007 invalid text) and ends the
connection; ``ConnectionClosed.reason`` starts ``protocol error:``.
"""

import base64
import os
import socket
import struct
import time
from collections import deque
from types import TracebackType

from tether.protocol.hashes import sha1

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from typing import Literal, Self

    State = Literal["open", "closing", "closed"]
    """``closing``: we sent a close frame and wait for the peer's."""

__all__ = ["ConnectionClosed", "HandshakeRejected", "WebSocket", "WebSocketError"]

_CHUNK = 64 * 1024
"""Bytes asked of the socket per read."""

CLOSE_TIMEOUT = 2.0
"""Seconds ``close()`` waits for the peer to answer the close frame."""

MAX_RESPONSE_HEAD = 64 * 1024
"""Bytes of the server's handshake response (status line and headers) read at most."""

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_PROTOCOL_ERROR = 1002
_INVALID_DATA = 1007
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


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


class HandshakeClosed(WebSocketError):
    """The connection closed before the server answered the upgrade request: nothing behind
    the port took it (an ssh forward whose far end is gone, a server stopping)."""

    def __init__(self) -> None:
        super().__init__("connection closed during the websocket handshake")


class ConnectionClosed(WebSocketError):
    """The connection is closed (by the peer, by us, or because the transport broke).

    ``code`` is the close code the peer sent, the code we closed with, or ``None`` when no close
    code was exchanged (the TCP connection dropped, or the close frame carried no code).
    """

    def __init__(self, code: int | None, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"websocket closed (code={code}){': ' + reason if reason else ''}")


class _ProtocolError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _mask(key: bytes, data: bytes) -> bytes:
    """`data` XORed with the 4-byte `key` repeated, computed on whole integers (fast in
    CPython even for megabytes)."""
    size = len(data)
    if not size:
        return b""
    repeated = (key * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        size, "little"
    )


def _frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    key = os.urandom(4)
    return header + key + _mask(key, payload)


def _close_payload(code: int | None, reason: str) -> bytes:
    if code is None:
        return b""
    return struct.pack("!H", code) + reason.encode("utf-8")[:123]


def _valid_close_code(code: int) -> bool:
    # RFC 6455 7.4: 1000-1003, 1007-1014 are defined; 3000-4999 are for applications.
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


def _open_tcp(host: str, port: int, timeout: float) -> socket.socket:
    """`socket.create_connection`, but an ASCII host goes to getaddrinfo as bytes, which skips
    the IDNA codec: importing `encodings.idna` (with `stringprep`) is a noticeable part of a
    CLI's start."""
    name: str | bytes = host.encode("ascii") if host.isascii() else host
    failure: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        return sock
    raise failure or OSError(f"getaddrinfo found no address for {host}")


def _check_header(name: str, value: str) -> None:
    if not name or not set(name.encode("ascii", "replace")) <= _TOKEN:
        raise ValueError(f"invalid header name {name!r}")
    if any(ch in value for ch in "\r\n\0"):
        raise ValueError(f"invalid value for header {name!r}")


class WebSocket:
    """A connected client websocket. Create one with :meth:`connect`."""

    def __init__(self, sock: socket.socket, send_timeout: float) -> None:
        # Use connect(); this constructor takes a socket whose upgrade is under way.
        self._sock = sock
        self._send_timeout = send_timeout
        self._state: State = "open"
        self._buffer = bytearray()
        """Bytes read and not yet parsed into frames."""
        self._messages: deque[bytes] = deque()
        self._fragments: list[bytes] = []
        self._fragmented: int | None = None
        """The opcode of the fragmented message being received, if any."""
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
        connection fails, ``WebSocketError`` for a malformed handshake response and
        ``ValueError`` for a header that cannot be sent (before any connection is made).
        """
        deadline = time.monotonic() + timeout
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        key = base64.b64encode(os.urandom(16))
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {authority}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key.decode('ascii')}",
            "Sec-WebSocket-Version: 13",
        ]
        for name, value in (headers or {}).items():
            _check_header(name, value)
            lines.append(f"{name}: {value}")
        # Built before the socket opens: invalid headers fail without a leak.
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        sock = _open_tcp(host, port, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request)
            conn = cls(sock, timeout)
            conn._handshake(key, deadline)
        except BaseException:
            sock.close()
            raise
        return conn

    def _handshake(self, key: bytes, deadline: float) -> None:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_RESPONSE_HEAD:
                raise WebSocketError("invalid websocket handshake response: headers too long")
            data = self._recv_chunk(deadline)
            if not data:
                raise HandshakeClosed()
            self._buffer += data
        head = bytes(self._buffer[:end]).decode("latin-1")
        del self._buffer[: end + 4]
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise WebSocketError(f"invalid websocket handshake response: {status_line[:80]!r}")
        status = int(parts[1])
        fields: dict[str, str] = {}
        for line in header_lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise WebSocketError(f"invalid websocket handshake response header: {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip()
            fields[name] = f"{fields[name]}, {value}" if name in fields else value
        if status != 101:
            raise HandshakeRejected(status, self._rejection_body(fields, deadline))
        expected = base64.b64encode(sha1(key + _GUID).digest()).decode("ascii")
        connection = {token.strip().lower() for token in fields.get("connection", "").split(",")}
        if (
            fields.get("upgrade", "").lower() != "websocket"
            or "upgrade" not in connection
            or fields.get("sec-websocket-accept") != expected
        ):
            raise WebSocketError("invalid websocket handshake response: not a websocket upgrade")
        if "sec-websocket-extensions" in fields or "sec-websocket-protocol" in fields:
            raise WebSocketError("invalid websocket handshake response: unrequested extension")
        # Frames the server sent right behind its 101 response.
        self._parse_frames()

    def _rejection_body(self, fields: dict[str, str], deadline: float) -> bytes:
        """The body of a refusal: as long as its Content-Length says, else up to EOF."""
        length = fields.get("content-length", "")
        want = int(length) if length.isdigit() else None
        while want is None or len(self._buffer) < want:
            data = self._recv_chunk(deadline)
            if not data:
                break
            self._buffer += data
        return bytes(self._buffer if want is None else self._buffer[:want])

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
        data = message.encode("utf-8") if isinstance(message, str) else message
        if isinstance(message, bytes):
            message.decode("utf-8")  # a UnicodeDecodeError here, not a 1007 from the peer
        if self._closed is not None:
            raise self._closed_error()
        if self._state != "open":
            raise ConnectionClosed(None, "close handshake in progress")
        self._send_raw(_frame(_TEXT, data))
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
            self._feed(self._recv_chunk(deadline))
        return self._messages.popleft()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Run the close handshake (waiting at most ``CLOSE_TIMEOUT``) and close the socket.

        Idempotent, and never raises for a connection that is already broken.
        """
        if not self._sock_open:
            return
        try:
            if self._state == "open":
                self._state = "closing"
                self._send_raw(_frame(_CLOSE, _close_payload(code, reason)))
                deadline = time.monotonic() + CLOSE_TIMEOUT
                # The peer's close reply (or EOF) ends in _finish(), which closes the socket.
                while self._sock_open:
                    self._feed(self._recv_chunk(deadline))
        except (OSError, WebSocketError):
            pass  # the peer is gone or slow; closing the socket is all that is left to do
        finally:
            self._finish(code, reason)

    def __enter__(self) -> "Self":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None else self._state
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
        """Take bytes read from the socket (``b""`` = EOF) and act on the frames they end."""
        if not data:
            self._finish(None, self._eof_detail or "connection lost")
            return
        self._buffer += data
        self._parse_frames()

    def _parse_frames(self) -> None:
        try:
            while self._closed is None and (frame := self._next_frame()) is not None:
                self._on_frame(*frame)
        except _ProtocolError as error:
            if self._state == "open":
                self._send_raw(_frame(_CLOSE, _close_payload(error.code, error.reason)))
            self._finish(error.code, f"protocol error: {error.reason}")

    def _next_frame(self) -> tuple[bool, int, bytes] | None:
        """(final, opcode, payload) of the next whole frame in the buffer, removed from it."""
        buffer = self._buffer
        if len(buffer) < 2:
            return None
        first, second = buffer[0], buffer[1]
        final, opcode, size = bool(first & 0x80), first & 0x0F, second & 0x7F
        if first & 0x70:
            raise _ProtocolError(_PROTOCOL_ERROR, "reserved bits set without an extension")
        if second & 0x80:
            raise _ProtocolError(_PROTOCOL_ERROR, "the server masked a frame")
        if opcode >= _CLOSE and (not final or size > 125):
            raise _ProtocolError(_PROTOCOL_ERROR, "a fragmented or long control frame")
        start = 2
        if size == 126:
            if len(buffer) < 4:
                return None
            size, start = struct.unpack_from("!H", buffer, 2)[0], 4
        elif size == 127:
            if len(buffer) < 10:
                return None
            size, start = struct.unpack_from("!Q", buffer, 2)[0], 10
            if size >> 63:
                raise _ProtocolError(_PROTOCOL_ERROR, "a frame length over 2**63")
        if len(buffer) < start + size:
            return None
        payload = bytes(buffer[start : start + size])
        del buffer[: start + size]
        return final, opcode, payload

    def _on_frame(self, final: bool, opcode: int, payload: bytes) -> None:
        if opcode in (_TEXT, _BINARY, _CONTINUATION):
            if opcode == _CONTINUATION:
                if self._fragmented is None:
                    raise _ProtocolError(_PROTOCOL_ERROR, "a continuation of no message")
                opcode = self._fragmented
            elif self._fragmented is not None:
                raise _ProtocolError(_PROTOCOL_ERROR, "a new message inside a fragmented one")
            self._fragments.append(payload)
            self._fragmented = None if final else opcode
            if final:
                message = b"".join(self._fragments)
                self._fragments.clear()
                if opcode == _TEXT:
                    try:
                        message.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise _ProtocolError(_INVALID_DATA, "text that is not UTF-8") from exc
                self._messages.append(message)
        elif opcode == _PING:
            if self._state == "open":
                self._send_raw(_frame(_PONG, payload))
        elif opcode == _CLOSE:
            self._on_close(payload)
        elif opcode != _PONG:  # we never ping; a pong is ignored
            raise _ProtocolError(_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")

    def _on_close(self, payload: bytes) -> None:
        code: int | None = None
        reason = ""
        if len(payload) == 1:
            raise _ProtocolError(_PROTOCOL_ERROR, "a close frame of one byte")
        if payload:
            code = struct.unpack_from("!H", payload)[0]
            if not _valid_close_code(code):
                raise _ProtocolError(_PROTOCOL_ERROR, f"invalid close code {code}")
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _ProtocolError(_INVALID_DATA, "a close reason that is not UTF-8") from exc
        if self._state == "open":
            # The peer started the close: echo its code, as RFC 6455 asks.
            self._state = "closing"
            self._send_raw(_frame(_CLOSE, _close_payload(code, "")))
        self._finish(code, reason)

    def _send_raw(self, data: bytes) -> None:
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
        self._state = "closed"
        if self._closed is None:
            self._closed = ConnectionClosed(code, reason)
        if self._sock_open:
            self._sock_open = False
            self._sock.close()
