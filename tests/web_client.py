"""What a browser does to `tether web`, for the tests and bench/web.py: one HTTP/1.1 request
on a fresh connection (h11, with whatever Host and Origin a test needs), signing in with the
printed token, and websockets (trio-websocket) carrying the cookie and the page's Origin."""

import contextlib
import ssl
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
import trio
import trio_websocket


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


class Page:
    """A browser tab on the server at `url` (the printed one): its origin and, once signed in,
    its cookie."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.token = parts.query.removeprefix("token=")
        self.ssl_context = ssl_context
        self.cookie = ""

    async def sign_in(self) -> Answer:
        answer = await self.fetch(f"/?token={self.token}")
        cookie = answer.header("set-cookie") or ""
        self.cookie = cookie.split(";")[0]
        return answer

    def headers(self, *, cookie: bool = True, origin: bool = True) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if cookie and self.cookie:
            found.append(("cookie", self.cookie))
        if origin:
            found.append(("origin", self.origin))
        return found

    async def fetch(
        self,
        target: str,
        method: str = "GET",
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        host: str | None = None,
    ) -> Answer:
        """One request on a connection of its own. `host` replaces the Host header."""
        async with await self.connect() as stream:
            conn = h11.Connection(h11.CLIENT)
            fields = [("host", host or f"{self.host}:{self.port}"), *headers]
            if body or method == "POST":
                fields.append(("content-length", str(len(body))))
            data = conn.send(h11.Request(method=method, target=target, headers=fields)) or b""
            if body:
                data += conn.send(h11.Data(data=body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            await stream.send_all(data)
            response: h11.Response | None = None
            parts: list[bytes] = []
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(bytes(await stream.receive_some(65536)))
                elif isinstance(event, h11.Response):
                    response = event
                elif isinstance(event, h11.Data):
                    parts.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            assert response is not None
            return Answer(
                response.status_code,
                [(k.decode(), v.decode()) for k, v in response.headers],
                b"".join(parts),
            )

    async def upgrade(self, path: str, headers: Sequence[tuple[str, str]] | None = None) -> Answer:
        """The answer to a websocket upgrade request for `path` that is refused (any other
        status than 101 is returned as it came)."""
        sent = self.headers() if headers is None else headers
        handshake = [
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ]
        return await self.fetch(path, headers=[*handshake, *sent])

    async def connect(self) -> trio.abc.Stream:
        stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        if self.ssl_context is not None:
            tls = trio.SSLStream(stream, self.ssl_context, server_hostname=self.host)
            await tls.do_handshake()
            stream = tls
        return stream

    @contextlib.asynccontextmanager
    async def websocket(
        self,
        path: str,
        headers: Sequence[tuple[str, str]] | None = None,
        *,
        message_queue_size: int = 1,
    ) -> AsyncGenerator[trio_websocket.WebSocketConnection]:
        """A websocket to `path`, sending the cookie and Origin (or `headers` instead). The
        TCP stream is closed here: trio-websocket leaves a client's open when the server
        closes first."""
        sent = self.headers() if headers is None else headers
        stream = await self.connect()
        try:
            async with trio.open_nursery() as nursery:
                ws = await trio_websocket.wrap_client_stream(
                    nursery,
                    stream,  # pyright: ignore[reportArgumentType]
                    f"{self.host}:{self.port}",
                    path,
                    extra_headers=[(k.encode(), v.encode()) for k, v in sent],
                    message_queue_size=message_queue_size,
                    max_message_size=64 * 1024 * 1024,
                )
                try:
                    yield ws
                finally:
                    with trio.move_on_after(5) as cleanup:
                        cleanup.shield = True
                        await ws.aclose()
        finally:
            await trio.aclose_forcefully(stream)
