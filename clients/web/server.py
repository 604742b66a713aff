"""`tether web`'s server: one trio process serving the page and relaying between browsers and
the daemons of this user's workspaces, HTTP and websockets on one port.

Routes (docs/web.md has the contract with the page):

    GET  /?token=T                   trade the printed token for the cookie, 303 to /
    GET  /                           the page (static/index.html)
    GET  /static/<file>              the page's files (an allowlist of kinds, no `..`)
    GET  /api/workspaces             {"workspaces": [...]}
    POST /api/workspaces/<id>/start  start that workspace's daemon: {"ok": ..., "error": ...}
    GET  /ws/overview                websocket: the workspaces, pushed whenever they change
    GET  /ws/daemon/<id>             websocket: relayed to that workspace's daemon

Every request passes `Gate` first (Host, Origin, then the credential; see
`tether.clients.web.security`), then the limits of `tether.clients.web.http`. At most
`max_connections` connections are served at once, of which at most `max_pending` may be
unproven (no request with a credential yet): one more unproven connection, or one more
connection when all are taken, drops the oldest unproven one, so a flood of connections that
never sign in cannot lock the browser out. When every connection is proven, one more is
answered 503 and closed.

Task tree: `WebServer.serve` → the overview's looks (`Overview.serve`) and one task per
connection, which owns the reading tasks of its websockets (page and daemon). Cancelling
`serve` closes every connection.
"""

import contextlib
import hashlib
import itertools
import re
import ssl
import sys
from collections.abc import Generator
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import msgspec
import trio
import trio_websocket

from tether.clients.web.http import (
    HEAD_TIMEOUT,
    MAX_HEAD_BYTES,
    RECEIVE_BYTES,
    Incoming,
    ReplayStream,
    TooLarge,
    request_bytes,
)
from tether.clients.web.overview import INTERVAL, Overview
from tether.clients.web.relay import HandshakeFailed, accept_key, open_daemon, relay
from tether.clients.web.security import Gate, Refused, header
from tether.clients.web.workspaces import look, start

DEFAULT_PORT = 8737
STATIC_DIR = Path(__file__).parent / "static"
MAX_CONNECTIONS = 256
MAX_PENDING = 64
MAX_STATIC_BYTES = 16 * 1024 * 1024
OVERVIEW_MESSAGE_BYTES = 4096
"""The largest frame a page may send on /ws/overview (it is expected to send none)."""

CONTENT_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".mjs": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".txt": b"text/plain; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
    ".ico": b"image/x-icon",
    ".woff2": b"font/woff2",
    ".json": b"application/json",
    ".webmanifest": b"application/manifest+json",
    ".map": b"application/json",
}
"""The kinds of file /static/ serves; any other is not found."""

_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_ID = re.compile(r"[0-9a-f]{16}")
_JSON = b"application/json"


class WebServer:
    """`tether web` on `host:port` (0: any free port), https when `ssl_context` is given.
    `token` is the URL's and `secret` the cookie's (fresh ones by default)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        ssl_context: ssl.SSLContext | None = None,
        static_dir: Path = STATIC_DIR,
        token: str | None = None,
        secret: str | None = None,
        overview_interval: float = INTERVAL,
        max_connections: int = MAX_CONNECTIONS,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.static_dir = static_dir
        self.overview = Overview(interval=overview_interval)
        self.max_connections = max_connections
        self.max_pending = max_pending
        self._pending: dict[int, trio.CancelScope] = {}
        """The connections that have not yet shown a credential, oldest first."""
        self._live: set[int] = set()
        """Every connection served, dropped ones no longer counted."""
        self._ids = itertools.count()
        self._token = token
        self._secret = secret
        self.gate: Gate | None = None

    async def serve(self, *, task_status: trio.TaskStatus[Gate] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, report the `Gate` (its `url` is what to print) and serve until cancelled.
        Raises OSError when the address cannot be listened on."""
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        port = int(listeners[0].socket.getsockname()[1])
        gate = self.gate = Gate(
            self.host,
            port,
            tls=self.ssl_context is not None,
            token=self._token,
            secret=self._secret,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(self.overview.serve)
            task_status.started(gate)
            await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        if len(self._live) >= self.max_connections and self._pending:
            self._drop_oldest()
        if len(self._live) >= self.max_connections:
            with trio.move_on_after(1):
                await stream.send_all(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
            await trio.aclose_forcefully(stream)
            return
        key = next(self._ids)
        self._live.add(key)
        try:
            with self._admitted(key):
                await self._serve_connection(stream, key)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
            pass  # the browser went away, or spoke no TLS
        except Exception as exc:  # one connection's failure must not stop the server
            print(f"tether web: a connection failed: {exc!r}", file=sys.stderr)
        finally:
            self._live.discard(key)
            await trio.aclose_forcefully(stream)

    @contextlib.contextmanager
    def _admitted(self, key: int) -> Generator[None]:
        """Serve connection `key` as unproven until `_proven(key)`: dropped (cancelled) should
        `max_pending` newer unproven ones arrive first."""
        while len(self._pending) >= self.max_pending:
            self._drop_oldest()
        with trio.CancelScope() as scope:
            self._pending[key] = scope
            try:
                yield
            finally:
                self._pending.pop(key, None)

    def _drop_oldest(self) -> None:
        oldest = next(iter(self._pending))
        self._pending.pop(oldest).cancel()
        self._live.discard(oldest)

    @property
    def connections(self) -> int:
        return len(self._live)

    def _proven(self, key: int) -> None:
        self._pending.pop(key, None)

    async def _serve_connection(self, raw: trio.SocketStream, key: int) -> None:
        stream: trio.abc.Stream = raw
        if self.ssl_context is not None:
            tls = trio.SSLStream(raw, self.ssl_context, server_side=True, https_compatible=True)
            with trio.move_on_after(HEAD_TIMEOUT):
                await tls.do_handshake()
                stream = tls
            if stream is raw:
                return
        incoming = Incoming(stream)
        while True:
            event: object = None
            with trio.move_on_after(HEAD_TIMEOUT):
                try:
                    event = await incoming.next_event()
                except h11.RemoteProtocolError as exc:
                    # h11 lets an answer go out unless the request got that far.
                    with contextlib.suppress(h11.LocalProtocolError):
                        await incoming.respond(
                            exc.error_status_hint, f"{exc}\n".encode(), close=True
                        )
                    return
            if not isinstance(event, h11.Request):
                return  # closed, or idle too long
            if not await self._request(incoming, event, key):
                return
            if not incoming.next_cycle():
                return

    async def _request(self, incoming: Incoming, request: h11.Request, key: int) -> bool:
        """Answer one request; False when the connection is to close (or was handed over)."""
        assert self.gate is not None
        headers = list(request.headers)
        target = urlsplit(request.target.decode("latin-1"))
        path = target.path
        method = request.method.decode("latin-1")
        upgrade = (header(headers, b"upgrade") or "").lower() == "websocket"
        try:
            # h11 bounds a head that arrives in parts; one that came whole is measured here.
            if sum(len(k) + len(v) + 4 for k, v in headers) + len(request.target) > MAX_HEAD_BYTES:
                raise TooLarge(431, f"a request head may have at most {MAX_HEAD_BYTES} bytes")
            body = None
            with trio.move_on_after(HEAD_TIMEOUT):
                body = await incoming.read_body()
            if body is None:
                raise TooLarge(408, "the request body did not arrive in time")
            self.gate.check_site(headers)
            if path == "/" and "token" in target.query and method in ("GET", "HEAD"):
                return await self._sign_in(incoming, parse_qs(target.query).get("token", [""]))
            self.gate.check_credential(headers)
            self._proven(key)
        except Refused as refused:
            await incoming.respond(refused.status, f"{refused.reason}\n".encode(), close=True)
            return False
        except TooLarge as large:
            await incoming.respond(large.status, f"{large.reason}\n".encode(), close=True)
            return False
        if upgrade:
            await self._websocket(incoming, request, path)
            return False
        return await self._route(incoming, method, path, body)

    async def _sign_in(self, incoming: Incoming, tokens: list[str]) -> bool:
        assert self.gate is not None
        if len(tokens) != 1 or not self.gate.token_ok(tokens[0]):
            await incoming.respond(
                401, b"wrong token: open the URL `tether web` printed\n", close=True
            )
            return False
        await incoming.respond(
            303,
            headers=[(b"location", b"/"), (b"set-cookie", self.gate.set_cookie())],
        )
        return True

    async def _route(self, incoming: Incoming, method: str, path: str, body: bytes) -> bool:
        head = method == "HEAD"
        if path == "/" or path.startswith("/static/"):
            if method not in ("GET", "HEAD"):
                return await _not_allowed(incoming, "GET")
            name = "index.html" if path == "/" else path.removeprefix("/static/")
            return await self._static(incoming, name, head_only=head)
        if path == "/api/workspaces":
            if method not in ("GET", "HEAD"):
                return await _not_allowed(incoming, "GET")
            workspaces = await self.overview.snapshot()
            await incoming.respond(
                200,
                msgspec.json.encode({"workspaces": workspaces}),
                content_type=_JSON,
                head_only=head,
            )
            return True
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "api", "workspaces"] and parts[4] == "start":
            if method != "POST":
                return await _not_allowed(incoming, "POST")
            return await self._start(incoming, parts[3])
        await incoming.respond(404, b"not found\n")
        return True

    async def _static(self, incoming: Incoming, name: str, *, head_only: bool) -> bool:
        file = self._static_file(unquote(name))
        data = None
        if file is not None:
            try:
                data = file.read_bytes() if file.stat().st_size <= MAX_STATIC_BYTES else None
            except OSError:
                data = None
        if file is None or data is None:
            await incoming.respond(404, b"not found\n")
            return True
        await incoming.respond(
            200,
            data,
            content_type=CONTENT_TYPES[file.suffix],
            # The page itself is never cached (it names the current assets); the assets are
            # checked again at each use (a rebuilt page replaces them in place).
            cache=b"no-store" if file.suffix == ".html" else b"no-cache",
            headers=[(b"etag", b'"%s"' % hashlib.sha256(data).hexdigest()[:32].encode())],
            head_only=head_only,
        )
        return True

    def _static_file(self, name: str) -> Path | None:
        """The file of the static folder `name` names: each part a plain name (no `..`, no
        hidden file, no backslash), a kind `CONTENT_TYPES` has, a regular file within the
        folder once links are resolved. None otherwise."""
        parts = name.split("/")
        if not all(_SEGMENT.fullmatch(part) for part in parts):
            return None
        file = self.static_dir.joinpath(*parts)
        if file.suffix not in CONTENT_TYPES:
            return None
        try:
            real = file.resolve(strict=True)
            folder = self.static_dir.resolve(strict=True)
        except OSError:
            return None
        if not real.is_relative_to(folder) or not real.is_file():
            return None
        return real

    async def _start(self, incoming: Incoming, key: str) -> bool:
        known = await trio.to_thread.run_sync(look)
        root = known.roots.get(key)
        if root is None:
            await _json(incoming, 404, {"ok": False, "error": "no such workspace"})
            return True
        error = await trio.to_thread.run_sync(start, root, abandon_on_cancel=True)
        await _json(incoming, 200, {"ok": True} if error is None else {"ok": False, "error": error})
        await self.overview.poke()
        return True

    async def _websocket(self, incoming: Incoming, request: h11.Request, path: str) -> None:
        if request.method != b"GET":
            await incoming.respond(400, b"a websocket upgrade is a GET\n", close=True)
            return
        parts = path.split("/")
        if path == "/ws/overview":
            async with trio.open_nursery() as nursery:
                page = await self._accept(nursery, incoming, request, OVERVIEW_MESSAGE_BYTES)
                if page is not None:
                    await self._push_overview(page)
            return
        if len(parts) != 4 or parts[:3] != ["", "ws", "daemon"]:
            await incoming.respond(404, b"not found\n", close=True)
            return
        key = parts[3]
        known = await trio.to_thread.run_sync(look) if _ID.fullmatch(key) else None
        if known is None or key not in known.roots:
            await incoming.respond(404, b"no such workspace\n", close=True)
            return
        daemon_info = known.running.get(key)
        if daemon_info is None:
            await incoming.respond(409, b"the workspace's daemon is not running\n", close=True)
            return
        upgrade_key = header(list(request.headers), b"sec-websocket-key")
        if upgrade_key is None or header(list(request.headers), b"sec-websocket-version") != "13":
            await incoming.respond(
                400, b"expected a websocket handshake (version 13)\n", close=True
            )
            return
        try:
            daemon, daemon_early = await open_daemon(daemon_info.info)
        except (HandshakeFailed, OSError) as exc:
            await incoming.respond(
                409,
                f"the workspace's daemon did not accept a connection: {exc}\n".encode(),
                close=True,
            )
            return
        try:
            switch = h11.InformationalResponse(
                status_code=101,
                headers=[
                    (b"upgrade", b"websocket"),
                    (b"connection", b"Upgrade"),
                    (b"sec-websocket-accept", accept_key(upgrade_key.encode("latin-1"))),
                ],
                reason=b"Switching Protocols",
            )
            await incoming.stream.send_all(incoming.h11.send(switch) or b"")
            page_early = bytes(incoming.h11.trailing_data[0])
            await relay(incoming.stream, page_early, daemon, daemon_early)
        finally:
            await trio.aclose_forcefully(daemon)

    async def _accept(
        self, nursery: trio.Nursery, incoming: Incoming, request: h11.Request, max_size: int
    ) -> trio_websocket.WebSocketConnection | None:
        """Hand the connection to trio-websocket and accept the upgrade; None when the
        request is not a valid one (wsproto answered it) or the client left."""
        trailing, _closed = incoming.h11.trailing_data
        stream = ReplayStream(incoming.stream, request_bytes(request) + trailing)
        with trio.move_on_after(HEAD_TIMEOUT):
            proposal = await trio_websocket.wrap_server_stream(
                nursery,
                stream,
                message_queue_size=1,
                max_message_size=max_size,
                receive_buffer_size=RECEIVE_BYTES,
            )
            return await proposal.accept()
        return None

    async def _push_overview(self, page: trio_websocket.WebSocketConnection) -> None:
        async with self.overview.watch(), trio.open_nursery() as nursery:

            async def read_until_closed() -> None:
                try:
                    while True:
                        await page.get_message()
                except trio_websocket.ConnectionClosed:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(read_until_closed)
            try:
                await self.overview.refresh()
                seen = self.overview.version
                while True:
                    frame = {"type": "workspaces", "workspaces": self.overview.workspaces}
                    await page.send_message(msgspec.json.encode(frame).decode())
                    seen = await self.overview.wait_changed(seen)
            except trio_websocket.ConnectionClosed:
                nursery.cancel_scope.cancel()


async def _json(incoming: Incoming, status: int, value: object) -> None:
    await incoming.respond(status, msgspec.json.encode(value), content_type=_JSON)


async def _not_allowed(incoming: Incoming, allowed: str) -> bool:
    await incoming.respond(
        405, b"method not allowed\n", headers=[(b"allow", allowed.encode())], close=True
    )
    return False
