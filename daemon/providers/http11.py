"""A small HTTP/1.1 transport over trio for the requests to a plain-HTTP model server (a local
model: Ollama, vLLM, llama.cpp): an `httpx.AsyncBaseTransport`, so the calls keep httpx's
requests, responses, body decoding and errors, without httpcore and h11 in between, which
cost about 0.5 ms of CPU per streamed call (`bench/model_call.py`), more than all the rest of
the call.

Rules:
- One request at a time per connection; a connection is reused (keep-alive) only when its
  response was HTTP/1.1, neither side said `Connection: close`, the body was read to its end
  and nothing followed it. An idle connection the server has closed (readable while idle) is
  dropped before it is used. At most `MAX_IDLE` connections wait idle.
- Bodies: `Content-Length`, chunked (extensions and trailers skipped), or until the server
  closes; none for 1xx (skipped), 204 and 304.
- Timeouts come from the request's `timeout` extension as httpx sets it: `connect` for the
  connection, `write` for sending the request, `read` for each read of the response.
- Failures are httpx's own exceptions, as httpx's transport raises them: `ConnectError` /
  `ConnectTimeout` (no connection), `WriteError` / `WriteTimeout`, `ReadError` /
  `ReadTimeout`, `RemoteProtocolError` (an answer that is not HTTP/1.1, or that ends early).
- Plain HTTP only: any other URL is refused (`UnsupportedProtocol`), so nothing meant for TLS
  goes out in clear text; an `https` base URL gets httpx's own transport
  (`wire.model_transport`).
"""

import math
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager

import httpx
import trio

MAX_IDLE = 20
"""Idle keep-alive connections kept (httpx's default too)."""
MAX_HEAD_BYTES = 64 * 1024
"""The longest response head (status line and headers) accepted."""
READ_SIZE = 65536


@contextmanager
def _mapped(
    slow: type[httpx.TimeoutException],
    failure: type[httpx.TransportError],
    request: httpx.Request,
) -> Generator[None]:
    """trio's failures of a socket operation as httpx's: `slow` for running out of time."""
    try:
        yield
    except trio.TooSlowError as exc:
        raise slow(str(exc) or type(exc).__name__, request=request) from exc
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise failure(str(exc) or type(exc).__name__, request=request) from exc


class _Connection:
    """One socket to the server and the bytes read past the last response."""

    __slots__ = ("buffer", "stream")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def fill(self, wait: float, request: httpx.Request) -> bool:
        """Read more into `buffer`, waiting at most `wait` seconds; False at the end of the
        stream."""
        with _mapped(httpx.ReadTimeout, httpx.ReadError, request), trio.fail_after(wait):
            data = await self.stream.receive_some(READ_SIZE)
        self.buffer += data
        return bool(data)

    async def line(self, wait: float, request: httpx.Request) -> bytes:
        """The next CRLF- (or LF-) ended line of a chunked body, without its end (each read
        waiting at most `wait` seconds)."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end]).rstrip(b"\r")
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("chunk header too long", request=request)
            if not await self.fill(wait, request):
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: incomplete"
                    " chunked read",
                    request=request,
                )


def _timeout(request: httpx.Request, which: str) -> float:
    value = request.extensions.get("timeout", {}).get(which)
    return math.inf if value is None else float(value)


class PlainHTTPTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over trio sockets, for `http://` URLs (see the module rules)."""

    def __init__(self) -> None:
        self._idle: list[tuple[tuple[bytes, int], _Connection]] = []
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{url.scheme}://'."
                if url.scheme
                else "Request URL is missing an 'http://' or 'https://' protocol.",
                request=request,
            )
        port = url.port or 80
        origin = (url.raw_host, port)
        body = await request.aread()  # bytes already for the dialects: no copy
        head = [request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        message = b"".join(head) + body
        conn = self._take_idle(origin)
        if conn is None:
            conn = await self._connect(url.host, port, request)
        try:
            with (
                _mapped(httpx.WriteTimeout, httpx.WriteError, request),
                trio.fail_after(_timeout(request, "write")),
            ):
                await conn.stream.send_all(message)
            return await self._response(conn, origin, request)
        except BaseException:
            await _close(conn)
            raise

    def _take_idle(self, origin: tuple[bytes, int]) -> _Connection | None:
        while True:
            found = next((i for i, (key, _) in enumerate(self._idle) if key == origin), None)
            if found is None:
                return None
            conn = self._idle.pop(found)[1]
            if not conn.buffer and not conn.stream.socket.is_readable():
                return conn
            conn.stream.socket.close()  # closed by the server (or talking out of turn)

    async def _connect(self, host: str, port: int, request: httpx.Request) -> _Connection:
        with (
            _mapped(httpx.ConnectTimeout, httpx.ConnectError, request),
            trio.fail_after(_timeout(request, "connect")),
        ):
            stream = await trio.open_tcp_stream(host, port)  # TCP_NODELAY is trio's default
        return _Connection(stream)

    async def _response(
        self, conn: _Connection, origin: tuple[bytes, int], request: httpx.Request
    ) -> httpx.Response:
        read_timeout = _timeout(request, "read")
        while True:
            end = conn.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buffer) > MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError("response head too long", request=request)
                if not await conn.fill(read_timeout, request):
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    )
                continue
            raw_head = bytes(conn.buffer[:end])
            del conn.buffer[: end + 4]
            version, status, reason, headers = _parse_head(raw_head, request)
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue): the real one follows
            break
        tokens = _connection_tokens(headers)
        reusable = (
            version == b"HTTP/1.1"
            and b"close" not in tokens
            and b"close" not in _connection_tokens(request.headers.raw)
        )
        body = _Body(self, conn, origin, request, headers, status, read_timeout, reusable)
        return httpx.Response(
            status,
            headers=headers,
            stream=body,
            request=request,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    def release(self, origin: tuple[bytes, int], conn: _Connection) -> None:
        """Put a connection whose response was read to its end back for the next request."""
        if self._closed or len(self._idle) >= MAX_IDLE:
            conn.stream.socket.close()
        else:
            self._idle.append((origin, conn))

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for _, conn in idle:
            conn.stream.socket.close()


def _parse_head(
    raw: bytes, request: httpx.Request
) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    lines = raw.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    try:
        version = status_line[0]
        status = int(status_line[1])
        if not version.startswith(b"HTTP/1.") or not 100 <= status <= 999:
            raise ValueError
    except (IndexError, ValueError):
        raise httpx.RemoteProtocolError(
            f"illegal status line: {lines[0][:100]!r}", request=request
        ) from None
    reason = status_line[2] if len(status_line) > 2 else b""
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            raise httpx.RemoteProtocolError(f"illegal header line: {line[:100]!r}", request=request)
        headers.append((name, value.strip(b" \t")))
    return version, status, reason, headers


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }


def _body_length(
    headers: list[tuple[bytes, bytes]], status: int, request: httpx.Request
) -> int | None:
    """The body's length; -1 for a chunked body, None for one that ends with the connection."""
    if status in (204, 304):
        return 0
    lengths: set[bytes] = set()
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            if value.strip().lower().rsplit(b",", 1)[-1].strip() == b"chunked":
                return -1
            return None
        if lowered == b"content-length":
            lengths.update(part.strip() for part in value.split(b","))
    if not lengths:
        return None
    if len(lengths) > 1 or not all(part.isdigit() for part in lengths):
        raise httpx.RemoteProtocolError("bad Content-Length", request=request)
    return int(lengths.pop())


class _Body(httpx.AsyncByteStream):
    """A response's body, read from its connection as it is iterated; closing it hands a
    connection that is done back to the transport, and closes any other."""

    def __init__(
        self,
        transport: PlainHTTPTransport,
        conn: _Connection,
        origin: tuple[bytes, int],
        request: httpx.Request,
        headers: list[tuple[bytes, bytes]],
        status: int,
        read_timeout: float,
        reusable: bool,
    ) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._origin = origin
        self._request = request
        self._length = _body_length(headers, status, request)
        self._read_timeout = read_timeout
        self._reusable = reusable and self._length is not None
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        if self._length == -1:
            async for piece in self._chunked(conn):
                yield piece
        elif self._length is None:
            while True:
                if conn.buffer:
                    piece = bytes(conn.buffer)
                    conn.buffer.clear()
                    yield piece
                if not await conn.fill(self._read_timeout, self._request):
                    break
        else:
            left = self._length
            while left:
                if not conn.buffer and not await conn.fill(self._read_timeout, self._request):
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body:"
                        f" received {self._length - left} bytes, expected {self._length}",
                        request=self._request,
                    )
                piece = bytes(conn.buffer[:left])
                del conn.buffer[:left]
                left -= len(piece)
                yield piece
        self._done = True

    async def _chunked(self, conn: _Connection) -> AsyncIterator[bytes]:
        timeout, request = self._read_timeout, self._request
        while True:
            size_line = await conn.line(timeout, request)
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise httpx.RemoteProtocolError(
                    f"illegal chunk header: {size_line[:100]!r}", request=request
                ) from None
            if size == 0:
                while await conn.line(timeout, request):  # trailers, up to the empty line
                    pass
                return
            left = size
            while left:
                if not conn.buffer and not await conn.fill(timeout, request):
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body:"
                        " incomplete chunked read",
                        request=request,
                    )
                piece = bytes(conn.buffer[:left])
                del conn.buffer[:left]
                left -= len(piece)
                yield piece
            if await conn.line(timeout, request):
                raise httpx.RemoteProtocolError("chunk not followed by CRLF", request=request)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._reusable and not conn.buffer:
            self._transport.release(self._origin, conn)
        else:
            await _close(conn)


async def _close(conn: _Connection) -> None:
    with trio.CancelScope(shield=True):
        await conn.stream.aclose()
