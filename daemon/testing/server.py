"""`ModelServer`: the scripted model server on a background thread, and its HTTP server.

Introspection endpoints: ``GET /_tether/requests`` (every model request body received, either
dialect, in order), ``GET /_tether/headers`` (the headers of those requests, names in lower
case, in the same order), ``POST /_tether/script`` (replace the script, reset the step counter
and the recorded requests), ``POST /_tether/release`` (let held streams pass one more hold),
``GET /_tether/health``. ``GET /v1/models`` lists the script's
model in the OpenAI shape, or the Anthropic one when the request has an ``anthropic-version``
header.

Base URLs: ``ModelServer.base_url`` (``http://HOST:PORT/v1``) is the OpenAI base URL;
tether's Anthropic client takes it too, or the root ``ModelServer.url``.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tether.testing.handler import Handler
from tether.testing.script import JSONObject, Script, coerce_script
from tether.testing.state import ServerState

_Request = socket.socket | tuple[bytes, socket.socket]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], state: ServerState, family: socket.AddressFamily
    ) -> None:
        self.address_family = family
        self.state = state
        self._connections_lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name with getfqdn(), which can stall on hosts
        # with slow reverse DNS; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: _Request, client_address: Any) -> None:
        # Like ThreadingMixIn, but keeps track of open connections so stop() can end them.
        sock = request if isinstance(request, socket.socket) else request[1]
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address, sock),
            name=f"model-server-conn-{client_address}",
            daemon=True,
        )
        with self._connections_lock:
            self._connections[sock] = thread
        thread.start()

    def _serve_connection(
        self, request: _Request, client_address: Any, sock: socket.socket
    ) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._connections_lock:
                self._connections.pop(sock, None)

    def handle_error(self, request: _Request, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError) or self.state.stopping.is_set():
            return  # a client went away or we are shutting down: nothing worth reporting
        super().handle_error(request, client_address)

    def close_connections(self, timeout: float) -> None:
        with self._connections_lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in connections:
            thread.join(max(0.0, deadline - time.monotonic()))


class ModelServer:
    """A scripted model server (OpenAI chat completions and Anthropic Messages) on a
    background thread.

    >>> with ModelServer({"steps": [{"text": "hi"}]}) as server:
    ...     base_url = server.base_url  # "http://127.0.0.1:PORT/v1"
    """

    def __init__(
        self, script: Mapping[str, Any] | Script, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._state = ServerState(coerce_script(script))
        self._host = host
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ModelServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("ModelServer is already running")
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        self._state.stopping.clear()
        server = _Server((self._host, self._requested_port), self._state, family)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="model-server",
            daemon=True,
        )
        self._server = server
        self._thread = thread
        thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end open connections and release the port. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = None
        self._thread = None
        self._state.stopping.set()
        server.shutdown()
        server.close_connections(timeout=2.0)
        server.server_close()
        thread.join()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ModelServer is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:PORT``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def script(self) -> Script:
        return self._state.script

    @property
    def requests(self) -> list[JSONObject]:
        """Copies of every model request body received so far (either dialect), in order."""
        return self._state.recorded()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[JSONObject]:
        """Block until at least `count` requests have arrived (since the last `set_script`)
        and return copies of them; `TimeoutError` after `timeout` seconds."""
        return self._state.wait_recorded(count, timeout)

    @property
    def abandoned(self) -> list[JSONObject]:
        """Copies of the requests whose sender closed its connection before the server read
        them (since the last `set_script`): they took no step and are not in `requests`."""
        return self._state.recorded_abandoned()

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers of those requests (names in lower case), in the same order."""
        return self._state.recorded_headers()

    def set_script(self, script: Mapping[str, Any] | Script) -> None:
        """Replace the script; resets the step counter, the recorded requests and the count
        of releases."""
        self._state.set_script(coerce_script(script))

    def release(self) -> None:
        """Let streams held by a step's ``hold_at_chunks`` pass one more hold (also
        ``POST /_tether/release``)."""
        self._state.release()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
