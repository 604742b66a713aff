"""A synchronous JSON-RPC client for the daemon, for thin clients that should start fast.

It imports no async framework: a blocking websocket (wsproto over a socket) is all a CLI needs.
Calls are typed by the protocol's method descriptors (`Method`); notifications that arrive while
waiting for a response are kept, in order, for `next_notification`.
"""

import os
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Self, TypeVar, overload

import msgspec

from tether.clients.core.call_error import CallError
from tether.clients.core.discovery import DaemonUnavailable, NotRunning, connect
from tether.clients.core.initialize import initialize_params
from tether.clients.core.websocket import WebSocket
from tether.protocol import codec
from tether.protocol.base import Wire
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.jsonrpc import Envelope, request_frame
from tether.protocol.methods import (
    INITIALIZE,
    METHODS,
    Empty,
    InitializeParams,
    Method,
    ProviderEnvironment,
)
from tether.protocol.version import PROTOCOL_VERSION, __version__

P = TypeVar("P", bound=Wire)
R = TypeVar("R", bound=Wire)

_envelope = msgspec.json.Decoder(Envelope)


def provider_environment(env: Mapping[str, str]) -> ProviderEnvironment:
    """The provider variables of `env`, as `initialize` sends them (see
    `ProviderEnvironment`: the daemon then uses these, not the ones it was started with)."""
    return msgspec.convert(initialize_params("", env)["providerEnv"], ProviderEnvironment)


class Client:
    def __init__(self, ws: WebSocket, info: DiscoveryInfo) -> None:
        self.ws = ws
        self.info = info
        self._next_id = 0
        self._notifications: deque[tuple[str, Wire]] = deque()
        self._initializing: str | None = None
        """The id of an `initialize` sent and not yet answered (`send_initialize`)."""

    @classmethod
    def connect(
        cls,
        workspace: Path,
        *,
        client_name: str = "tether-cli",
        autostart: bool = True,
        idle_timeout: float | None = None,
        send_environment: bool = True,
        wait_initialized: bool = True,
    ) -> Self:
        """Connect to the workspace's daemon (starting it when allowed) and initialize,
        sending this process's provider variables unless `send_environment` is false (the
        daemon's own then apply to this connection). With `wait_initialized` false the
        answer to `initialize` is read with the next call's (see `send_initialize`)."""
        ws, found = connect(workspace, autostart=autostart, idle_timeout=idle_timeout)
        client = cls(ws, found.info)
        params = InitializeParams(
            client_name=client_name,
            client_version=__version__,
            protocol_version=PROTOCOL_VERSION,
            provider_env=provider_environment(os.environ) if send_environment else None,
        )
        if wait_initialized:
            client.call(INITIALIZE, params)
        else:
            client.send_initialize(params)
        return client

    @classmethod
    def adopt(cls, ws: WebSocket, discovery: bytes, sent: int, frames: list[bytes]) -> Self:
        """The client of a connection a `Prelude` opened: `discovery` the daemon's discovery
        file as read, `sent` the requests sent on it (all answered), `frames` what was read
        (its notifications are kept, in order, for `next_notification`)."""
        client = cls(ws, msgspec.json.decode(discovery, type=DiscoveryInfo))
        client._next_id = sent
        for frame in frames:
            envelope = _envelope.decode(frame)
            if envelope.method is not None:
                client._keep_notification(envelope)
        return client

    def read_answer(self, method: Method[P, R], frame: bytes) -> R:
        """The result a response frame to `method` carries (one a `Prelude` read)."""
        return codec.decode_as(method.result, _envelope.decode(frame).result)

    def send_initialize(self, params: InitializeParams) -> None:
        """Send `initialize` without waiting for its answer: the next call goes out right
        behind it (the daemon answers a connection's requests in order, and refuses every
        request of a connection whose `initialize` failed), saving a round trip. That call,
        `next_notification` or `wait_initialized` reads the answer first and raises its
        `CallError`, if any."""
        self._initializing = self._send(INITIALIZE, params)

    def wait_initialized(self) -> None:
        """Read the answer to a `send_initialize` not yet read; raise its `CallError`."""
        request_id, self._initializing = self._initializing, None
        if request_id is not None:
            self._response(INITIALIZE, request_id)

    def close(self) -> None:
        self.ws.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @overload
    def call(self, method: Method[Empty, R]) -> R: ...
    @overload
    def call(self, method: Method[P, R], params: P) -> R: ...
    def call(self, method: Method[P, R], params: P | None = None) -> R:
        """Send a request and wait for its response, decoded as the method's result; raise
        `CallError` for an error response. Only a method whose params are `Empty` may omit them."""
        request_id = self._send(method, params or Empty())
        self.wait_initialized()
        return self._response(method, request_id)

    def _send(self, method: Method[P, R], params: P | Empty) -> str:
        self._next_id += 1
        request_id = f"c{self._next_id}"
        self.ws.send(request_frame(request_id, method.name, params))
        return request_id

    def _response(self, method: Method[P, R], request_id: str) -> R:
        """Read up to the response to `request_id`, keeping the notifications before it."""
        while True:
            envelope = _envelope.decode(self.ws.recv())
            if envelope.method is not None:
                self._keep_notification(envelope)
                continue
            if envelope.error is not None and envelope.id in (request_id, None):
                # An id-less error answers a request the daemon could not read: this one.
                error = envelope.error
                raise CallError(method.name, error.code, error.message, error.data)
            if envelope.id != request_id:
                continue
            return codec.decode_as(method.result, envelope.result)

    def next_notification(self, timeout: float | None = None) -> tuple[str, Wire]:
        """The next notification, waiting up to `timeout` (TimeoutError after that)."""
        self.wait_initialized()
        while not self._notifications:
            envelope = _envelope.decode(self.ws.recv(timeout))
            if envelope.method is not None:
                self._keep_notification(envelope)
        return self._notifications.popleft()

    def _keep_notification(self, envelope: Envelope) -> None:
        method = envelope.method
        assert method is not None
        params = codec.read_notification(method, envelope.params)
        if params is not None:
            self._notifications.append((method, params))


__all__ = ["METHODS", "CallError", "Client", "DaemonUnavailable", "NotRunning"]
