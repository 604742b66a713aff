"""The CLI's blocking JSON-RPC client (`tether.clients.core.rpc.Client`) against a trio-websocket
server on 127.0.0.1 that plays the daemon: what goes on the wire, and in which order.

The client blocks, so it runs in a worker thread while the server runs in the test's trio loop.
"""

import contextlib
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, WebSocketServer, serve_websocket

from tether.clients.core.rpc import CallError, Client
from tether.clients.core.websocket import WebSocket
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.errors import ErrorCode
from tether.protocol.jsonrpc import decode_envelope, error_frame, result_frame
from tether.protocol.methods import (
    SESSION_LIST,
    InitializeParams,
    InitializeResult,
    SessionListResult,
)
from tether.protocol.version import PROTOCOL_VERSION, __version__

T = TypeVar("T")
Answer = Callable[[list[tuple[str, str]]], list[bytes]]
"""Given the requests received (id, method), the frames to send back."""

INITIALIZE = InitializeParams(
    client_name="test", client_version=__version__, protocol_version=PROTOCOL_VERSION
)


def _info(port: int) -> DiscoveryInfo:
    return DiscoveryInfo(
        pid=1,
        port=port,
        token="t",
        protocol_version=PROTOCOL_VERSION,
        daemon_version=__version__,
        workspace="/w",
        started_at=0.0,
    )


async def _against_daemon(requests: int, answer: Answer, client: Callable[[Client], T]) -> T:
    """Serve one connection that reads `requests` requests before it answers any (a client
    that waits for an answer before its next request never gets one), then sends what
    `answer` makes of them; run `client` in a thread meanwhile and return its result."""

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        received: list[tuple[str, str]] = []
        with trio.fail_after(5):
            while len(received) < requests:
                envelope = decode_envelope(await ws.get_message())
                assert isinstance(envelope.id, str)
                assert envelope.method is not None
                received.append((envelope.id, envelope.method))
        with contextlib.suppress(ConnectionClosed):  # a client done after the first answer
            for frame in answer(received):
                await ws.send_message(frame.decode())

    def run(port: int) -> T:
        with Client(WebSocket.connect("127.0.0.1", port), _info(port)) as rpc:
            return client(rpc)

    async with trio.open_nursery() as nursery:
        server: WebSocketServer = await nursery.start(
            partial(serve_websocket, handler, "127.0.0.1", 0, None)
        )
        with trio.fail_after(10):
            result = await trio.to_thread.run_sync(run, server.port)
        nursery.cancel_scope.cancel()
    return result


def _answer_all(received: list[tuple[str, str]]) -> list[bytes]:
    results: dict[str, object] = {
        "initialize": InitializeResult(
            protocol_version=PROTOCOL_VERSION, daemon_version=__version__, workspace="/w", pid=1
        ),
        "session/list": SessionListResult(sessions=[]),
    }
    return [result_frame(request_id, results[method]) for request_id, method in received]


async def test_the_first_call_goes_out_behind_an_unanswered_initialize() -> None:
    def client(rpc: Client) -> int:
        rpc.send_initialize(INITIALIZE)
        return len(rpc.call(SESSION_LIST).sessions)

    assert await _against_daemon(2, _answer_all, client) == 0


async def test_a_refused_initialize_is_the_error_the_pipelined_call_raises() -> None:
    def refuse(received: list[tuple[str, str]]) -> list[bytes]:
        (init_id, _), (list_id, _) = received
        return [
            error_frame(init_id, ErrorCode.UNSUPPORTED_PROTOCOL, "update tether"),
            error_frame(list_id, ErrorCode.NOT_INITIALIZED, "send `initialize` first"),
        ]

    def client(rpc: Client) -> CallError:
        rpc.send_initialize(INITIALIZE)
        with pytest.raises(CallError) as refused:
            rpc.call(SESSION_LIST)
        return refused.value

    error = await _against_daemon(2, refuse, client)
    assert (error.method, error.code) == ("initialize", ErrorCode.UNSUPPORTED_PROTOCOL)
