"""The synchronous CLI websocket client against real trio servers on 127.0.0.1.

The client blocks, so it runs in a worker thread (``trio.to_thread.run_sync``) while the server
runs in the test's trio loop. Most tests use a trio-websocket server (an independent one); a
few use a bare wsproto server to put exact bytes on the wire (fragments, frames split across
reads, several frames in one write, EOF without a close frame).
"""

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import pytest
import trio
from trio_websocket import ConnectionClosed as ServerConnectionClosed
from trio_websocket import (
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from tether.clients.core.rpc import Client
from tether.clients.core.websocket import (
    ConnectionClosed,
    HandshakeRejected,
    WebSocket,
    WebSocketError,
)
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.events import SessionRenamed
from tether.protocol.methods import SessionEventParams

HOST = "127.0.0.1"

T = TypeVar("T")
WsHandler = Callable[[WebSocketRequest], Awaitable[None]]


async def run_against_websocket_server(
    handler: WsHandler,
    client: Callable[[int], T],
    *,
    max_message_size: int = 1024 * 1024,
) -> T:
    """Serve ``handler`` with trio-websocket, run ``client(port)`` in a thread, return its result.

    Waits for the handler to return too, so assertions inside it always run.
    """
    handler_done = trio.Event()

    async def tracked(request: WebSocketRequest) -> None:
        await handler(request)
        handler_done.set()

    async with trio.open_nursery() as nursery:
        server: WebSocketServer = await nursery.start(
            partial(
                serve_websocket,
                tracked,
                HOST,
                0,
                None,
                max_message_size=max_message_size,
                receive_buffer_size=64 * 1024,
            )
        )
        result = await trio.to_thread.run_sync(client, server.port)
        await handler_done.wait()
        nursery.cancel_scope.cancel()
    return result


async def echo_until_closed(request: WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except ServerConnectionClosed:
        pass


async def wait_for_close(ws: WebSocketConnection) -> None:
    """Sit until the client closes (whatever it sends is ignored)."""
    try:
        while True:
            await ws.get_message()
    except ServerConnectionClosed:
        pass


async def wait_for_client_close(request: WebSocketRequest) -> None:
    await wait_for_close(await request.accept())


# ------------------------------------------------------------------ trio-websocket server


async def test_echo_round_trip_including_large_and_non_ascii_messages() -> None:
    received_types: list[type] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            while True:
                message = await ws.get_message()
                received_types.append(type(message))
                await ws.send_message(message)
        except ServerConnectionClosed:
            pass

    big = ("é" + "x" * 1023) * 3 * 1024  # 3 Mi characters, just over 3 MB of UTF-8
    messages: list[str | bytes] = [
        "hello",
        "héllo wörld ✓ 🚀 日本語",
        '{"jsonrpc":"2.0","params":{"text":"naïve ✓"}}'.encode(),
        big,
        "after the big one",
    ]

    def client(port: int) -> list[bytes]:
        with WebSocket.connect(HOST, port) as ws:
            replies: list[bytes] = []
            for message in messages:
                ws.send(message)
                replies.append(ws.recv(timeout=5))
            return replies

    with trio.fail_after(10):
        replies = await run_against_websocket_server(
            handler, client, max_message_size=8 * 1024 * 1024
        )

    expected = [m.encode("utf-8") if isinstance(m, str) else m for m in messages]
    assert replies == expected
    assert len(replies[3]) > 3_000_000
    assert received_types == [str] * len(messages)  # bytes go out as TEXT frames too


async def test_custom_headers_and_path_reach_the_server() -> None:
    seen: dict[str, str] = {}

    async def handler(request: WebSocketRequest) -> None:
        headers = {name.decode(): value.decode() for name, value in request.headers}
        seen["authorization"] = headers.get("authorization", "")
        seen["x-tether-client"] = headers.get("x-tether-client", "")
        seen["path"] = request.path
        await wait_for_client_close(request)

    def client(port: int) -> None:
        headers = {"Authorization": "Bearer s3cret-token", "X-Tether-Client": "cli/0.1"}
        with WebSocket.connect(HOST, port, path="/rpc?session=abc", headers=headers):
            pass

    with trio.fail_after(10):
        await run_against_websocket_server(handler, client)

    assert seen == {
        "authorization": "Bearer s3cret-token",
        "x-tether-client": "cli/0.1",
        "path": "/rpc?session=abc",
    }


async def test_rejected_handshake_raises_with_status_and_body() -> None:
    async def handler(request: WebSocketRequest) -> None:
        await request.reject(403, body=b"nope")

    def client(port: int) -> HandshakeRejected:
        with pytest.raises(HandshakeRejected) as info:
            WebSocket.connect(HOST, port, headers={"Authorization": "Bearer wrong"})
        return info.value

    with trio.fail_after(10):
        error = await run_against_websocket_server(handler, client)

    assert error.status == 403
    assert error.body == b"nope"
    assert isinstance(error, WebSocketError)
    assert "403" in str(error)


async def test_server_ping_is_answered_while_receiving() -> None:
    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.ping(b"are-you-there")  # returns only once the pong arrives
        await ws.send_message("pong received")
        await wait_for_close(ws)

    def client(port: int) -> bytes:
        with WebSocket.connect(HOST, port) as ws:
            return ws.recv(timeout=5)

    with trio.fail_after(10):
        reply = await run_against_websocket_server(handler, client)

    assert reply == b"pong received"


async def test_server_close_raises_connection_closed_after_buffered_messages() -> None:
    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.send_message("last words")
        await ws.aclose(4001, "go away")  # waits for the client's close reply

    def client(port: int) -> None:
        ws = WebSocket.connect(HOST, port)
        assert ws.recv(timeout=5) == b"last words"
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=5)
        assert info.value.code == 4001
        assert info.value.reason == "go away"
        with pytest.raises(ConnectionClosed) as again:
            ws.recv(timeout=5)
        assert again.value.code == 4001
        with pytest.raises(ConnectionClosed):
            ws.send("too late")
        assert ws.fileno() == -1  # the socket is already closed
        ws.close()  # and closing again is a no-op

    with trio.fail_after(10):
        await run_against_websocket_server(handler, client)


async def test_client_close_is_a_polite_handshake() -> None:
    close_seen: list[tuple[int, str | None]] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            while True:
                await ws.get_message()
        except ServerConnectionClosed:
            assert ws.closed is not None
            close_seen.append((ws.closed.code, ws.closed.reason))

    def client(port: int) -> None:
        ws = WebSocket.connect(HOST, port)
        assert ws.fileno() >= 0
        ws.send("bye")
        ws.close(4000, "done here")
        ws.close()  # idempotent
        assert ws.fileno() == -1
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=1)
        with pytest.raises(ConnectionClosed):
            ws.send("after close")

    with trio.fail_after(10):
        await run_against_websocket_server(handler, client)

    assert close_seen == [(4000, "done here")]


async def test_recv_timeout_then_next_message_arrives_intact() -> None:
    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        assert await ws.get_message() == "go"
        await ws.send_message("late ✓")
        await wait_for_close(ws)

    def client(port: int) -> tuple[float, bytes]:
        with WebSocket.connect(HOST, port) as ws:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0.2)
            waited = time.monotonic() - started
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0)  # a pure poll
            ws.send("go")
            return waited, ws.recv(timeout=5)

    with trio.fail_after(10):
        waited, reply = await run_against_websocket_server(handler, client)

    assert waited >= 0.19
    assert reply == "late ✓".encode()


async def test_back_to_back_messages_are_all_received() -> None:
    sent = threading.Event()

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.send_message("one")
        await ws.send_message("two")
        await ws.send_message(b"\x00\xffbinary")
        await ws.send_message("three")
        sent.set()
        await wait_for_close(ws)

    def client(port: int) -> list[bytes]:
        with WebSocket.connect(HOST, port) as ws:
            assert sent.wait(5)  # everything is in the socket buffer before the first read
            return [ws.recv(timeout=5) for _ in range(4)]

    with trio.fail_after(10):
        replies = await run_against_websocket_server(handler, client)

    assert replies == [b"one", b"two", b"\x00\xffbinary", b"three"]


def test_connection_refused_is_an_os_error() -> None:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        WebSocket.connect(HOST, port, timeout=2)


# ------------------------------------------------------------- bare wsproto server


class RawPeer:
    """The server end of one connection, driven by hand with wsproto."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)
        self.events: deque[Event] = deque()

    async def next_event(self) -> Event | None:
        """The next event from the client, or ``None`` at EOF."""
        while not self.events:
            data = await self.stream.receive_some(64 * 1024)
            if not data:
                return None
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return self.events.popleft()

    async def accept(self) -> None:
        event = await self.next_event()
        assert isinstance(event, Request)
        await self.stream.send_all(self.ws.send(AcceptConnection()))

    def frame(self, event: Event) -> bytes:
        return bytes(self.ws.send(event))

    async def next_text(self) -> str:
        event = await self.next_event()
        assert isinstance(event, TextMessage)
        assert event.message_finished
        return event.data

    async def finish_close(self) -> CloseConnection:
        """Wait for the client's close frame, answer it and hang up."""
        event = await self.next_event()
        assert isinstance(event, CloseConnection)
        await self.stream.send_all(self.frame(event.response()))
        await self.stream.aclose()
        return event


async def run_against_raw_server(
    handler: Callable[["RawPeer"], Awaitable[None]], client: Callable[[int], T]
) -> T:
    handler_done = trio.Event()

    async def on_connection(stream: trio.SocketStream) -> None:
        await handler(RawPeer(stream))
        handler_done.set()

    async with trio.open_nursery() as nursery:
        listeners: list[trio.SocketListener] = await nursery.start(
            partial(trio.serve_tcp, on_connection, 0, host=HOST)
        )
        port: int = listeners[0].socket.getsockname()[1]
        result = await trio.to_thread.run_sync(client, port)
        await handler_done.wait()
        nursery.cancel_scope.cancel()
    return result


async def test_fragmented_message_survives_a_timeout_mid_frame() -> None:
    async def handler(peer: RawPeer) -> None:
        await peer.accept()
        first = peer.frame(TextMessage(data="frag-1 é ", message_finished=False))
        second = peer.frame(TextMessage(data="frag-2 ✓", message_finished=True))
        # The whole first fragment plus a cut through the second frame's header.
        await peer.stream.send_all(first + second[:1])
        assert await peer.next_text() == "more please"
        await peer.stream.send_all(second[1:])
        await peer.finish_close()

    def client(port: int) -> bytes:
        with WebSocket.connect(HOST, port) as ws:
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0.3)
            assert ws.pending == 0
            ws.send("more please")
            return ws.recv(timeout=5)

    with trio.fail_after(10):
        reply = await run_against_raw_server(handler, client)

    assert reply == "frag-1 é frag-2 ✓".encode()


async def test_many_frames_in_one_read_are_queued_and_pings_answered() -> None:
    pongs: list[bytes] = []
    sent = threading.Event()

    async def handler(peer: RawPeer) -> None:
        await peer.accept()
        assert await peer.next_text() == "go"
        burst = b"".join(
            [
                peer.frame(TextMessage(data="alpha")),
                peer.frame(Ping(payload=b"hb-1")),
                peer.frame(BytesMessage(data=b"\x01\x02", message_finished=False)),
                peer.frame(BytesMessage(data=b"\x03", message_finished=True)),
                peer.frame(TextMessage(data="gam", message_finished=False)),
                peer.frame(TextMessage(data="ma", message_finished=True)),
            ]
        )
        await peer.stream.send_all(burst)  # one write: the client reads it in one go
        sent.set()
        event = await peer.next_event()
        assert isinstance(event, Pong)
        pongs.append(bytes(event.payload))
        await peer.finish_close()

    def client(port: int) -> tuple[bytes, int, bytes, bytes]:
        with WebSocket.connect(HOST, port) as ws:
            ws.send("go")
            assert sent.wait(5)
            first = ws.recv(timeout=5)
            queued = ws.pending
            return first, queued, ws.recv(timeout=0), ws.recv(timeout=0)

    with trio.fail_after(10):
        first, queued, second, third = await run_against_raw_server(handler, client)

    assert (first, queued, second, third) == (b"alpha", 2, b"\x01\x02\x03", b"gamma")
    assert pongs == [b"hb-1"]


async def test_eof_without_close_frame_is_connection_closed_without_code() -> None:
    async def handler(peer: RawPeer) -> None:
        await peer.accept()
        await peer.stream.send_all(peer.frame(TextMessage(data="bye")))
        await peer.stream.aclose()

    def client(port: int) -> ConnectionClosed:
        ws = WebSocket.connect(HOST, port)
        try:
            assert ws.recv(timeout=5) == b"bye"
            with pytest.raises(ConnectionClosed) as info:
                ws.recv(timeout=5)
            return info.value
        finally:
            ws.close()

    with trio.fail_after(10):
        error = await run_against_raw_server(handler, client)

    assert error.code is None
    assert error.reason


async def test_silent_server_makes_connect_time_out() -> None:
    async def handler(peer: RawPeer) -> None:
        # Read the upgrade request and never answer; return once the client hangs up.
        while await peer.stream.receive_some(64 * 1024):
            pass

    def client(port: int) -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            WebSocket.connect(HOST, port, timeout=0.3)
        return time.monotonic() - started

    with trio.fail_after(10):
        waited = await run_against_raw_server(handler, client)

    assert waited >= 0.29  # it waited out its timeout


@pytest.mark.parametrize(
    ("raw", "code", "why"),
    [
        (
            b"\x81\x85abcd" + bytes(c ^ k for c, k in zip(b"hello", b"abcda", strict=True)),
            1002,
            "masked",
        ),
        (b"\x81\x02\xff\xfe", 1007, "UTF-8"),
        (b"\xc1\x01x", 1002, "reserved bits"),
        (b"\x80\x01x", 1002, "continuation of no message"),
        (b"\x09\x01x", 1002, "fragmented or long control frame"),
        (b"\x83\x00", 1002, "unknown opcode"),
    ],
)
async def test_a_frame_breaking_the_protocol_closes_with_the_reason(
    raw: bytes, code: int, why: str
) -> None:
    answered: list[CloseConnection] = []

    async def handler(peer: RawPeer) -> None:
        await peer.accept()
        await peer.stream.send_all(raw)
        event = await peer.next_event()
        assert isinstance(event, CloseConnection)
        answered.append(event)
        await peer.stream.aclose()

    def client(port: int) -> ConnectionClosed:
        with WebSocket.connect(HOST, port) as ws, pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=5)
        return info.value

    with trio.fail_after(10):
        error = await run_against_raw_server(handler, client)

    assert error.code == code
    assert error.reason.startswith("protocol error:")
    assert why in error.reason
    assert [event.code for event in answered] == [code]


async def test_a_forged_upgrade_answer_is_refused() -> None:
    async def handler(peer: RawPeer) -> None:
        await peer.next_event()
        await peer.stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: not-the-hash\r\n\r\n"
        )
        while await peer.stream.receive_some(1024):
            pass

    def client(port: int) -> WebSocketError:
        with pytest.raises(WebSocketError) as info:
            WebSocket.connect(HOST, port, timeout=5)
        return info.value

    with trio.fail_after(10):
        error = await run_against_raw_server(handler, client)
    assert "not a websocket upgrade" in str(error)


def test_a_header_that_would_split_the_request_is_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="Authorization"):
        WebSocket.connect(HOST, 9, headers={"Authorization": "Bearer x\r\nX-Injected: 1"})


async def test_the_client_ignores_notifications_it_cannot_read() -> None:
    """A newer daemon may send an event type, an item type or an enum value this client does
    not know: the client skips that notification and reads on."""
    known: dict[str, object] = {"type": "session_renamed", "title": "known"}
    sent: list[dict[str, object]] = [
        {"method": "session/event", "params": event_params({"type": "from_the_future", "x": 1})},
        {
            "method": "session/event",
            "params": event_params(
                {"type": "turn_completed", "turnId": "t_1", "status": "someday", "endedAt": 1.0}
            ),
        },
        {"method": "tether/unknown_notification", "params": {}},
        {"method": "session/event", "params": event_params(known, seq=4)},
    ]

    async def handler(peer: RawPeer) -> None:
        await peer.accept()
        for message in sent:
            frame = {"jsonrpc": "2.0", **message}
            await peer.stream.send_all(peer.frame(TextMessage(data=json.dumps(frame))))
        await peer.next_event()  # the client's close
        await peer.stream.aclose()

    def client(port: int) -> tuple[str, object]:
        info = DiscoveryInfo(
            pid=1,
            port=port,
            token="t",
            protocol_version=1,
            daemon_version="0",
            workspace="/",
            started_at=0.0,
        )
        with Client(WebSocket.connect(HOST, port), info) as rpc:
            return rpc.next_notification(timeout=5)

    with trio.fail_after(10):
        method, params = await run_against_raw_server(handler, client)
    assert method == "session/event"
    assert isinstance(params, SessionEventParams)
    assert (params.seq, params.event) == (4, SessionRenamed(title="known"))


def event_params(event: dict[str, object], seq: int = 1) -> dict[str, object]:
    return {"sessionId": "s_1", "epoch": "e", "seq": seq, "event": event}
