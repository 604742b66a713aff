"""The connection, its byte-bounded outbox and the websocket server, in-process: the daemon's
server on 127.0.0.1 in the test's trio loop, trio-websocket clients (an independent
implementation) on the other end, a real `Session` whose events are emitted by the test.

A client that "never reads" is a trio-websocket client whose messages nobody takes: its reader
stops once its one-message queue is full, and TCP backpressure does the rest.
"""

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from trio_websocket import WebSocketConnection, open_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.events import Request as WsRequest

from tests.inprocess import decode_event
from tether.daemon.rpc.connection import MAX_REQUESTS_IN_FLIGHT, Connection, Handler, Reply, on
from tether.daemon.rpc.outbox import MAX_MERGED_BYTES, Outbox
from tether.daemon.rpc.security import check_upgrade
from tether.daemon.rpc.websocket import WebSocket, serve_websocket
from tether.daemon.sessions.deltas import DeltaFrame
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode
from tether.protocol.events import ItemDelta, SessionRenamed, ToolProgress
from tether.protocol.jsonrpc import notification_frame, request_frame
from tether.protocol.methods import (
    INITIALIZE,
    SESSION_ATTACH,
    SESSION_READ,
    TOOLS_LIST,
    TURN_CANCEL,
    Empty,
    InitializeParams,
    InitializeResult,
    SessionAttachParams,
    SessionAttachResult,
    SessionEventParams,
    SessionReadResult,
    SessionRef,
    ToolInfo,
    ToolsListResult,
    TurnCancelParams,
    TurnCancelResult,
)

HOST = "127.0.0.1"
TOKEN = "t" * 64
AUTH = [(b"authorization", f"Bearer {TOKEN}".encode())]
BUDGET = 256 * 1024
"""A small per-client byte budget, so that a test fills it quickly."""
DELTA = "x" * 4000


class Daemonlet:
    """The server part of the daemon around a fixed handler table and one session."""

    def __init__(self, session: Session, *, queue_bytes: int = BUDGET) -> None:
        self.session = session
        self.queue_bytes = queue_bytes
        self.connections: list[Connection] = []
        self.ended: list[Connection] = []
        self.changed = trio.Event()
        self.handlers: dict[str, Handler] = dict(
            [
                on(INITIALIZE, self._initialize),
                on(SESSION_ATTACH, self._attach),
                on(TOOLS_LIST, self._big_answer),
                on(SESSION_READ, self._held),
                on(TURN_CANCEL, self._release),
            ]
        )
        self.held = 0
        """`session/read` requests running: each waits until `turn/cancel` names it."""
        self.releases: dict[str, trio.Event] = {}
        self.started: list[str] = []

    async def _initialize(self, conn: Connection, params: InitializeParams) -> InitializeResult:
        conn.initialized = True
        return InitializeResult(protocol_version=1, daemon_version="t", workspace="/", pid=1)

    async def _attach(self, conn: Connection, p: SessionAttachParams) -> Reply[SessionAttachResult]:
        result, replay = self.session.attach(conn, p.role, p.after)
        conn.sessions[self.session.id] = self.session
        return Reply(result, replay)

    async def _big_answer(self, conn: Connection, params: Empty) -> ToolsListResult:
        tool = ToolInfo(
            name="big", description="d" * 60_000, read_only=True, input_schema=msgspec.Raw(b"{}")
        )
        return ToolsListResult(tools=[tool])

    async def _held(self, conn: Connection, p: SessionRef) -> SessionReadResult:
        self.started.append(p.session_id)
        self.held += 1
        self._changed()
        try:
            await self.releases.setdefault(p.session_id, trio.Event()).wait()
        finally:
            self.held -= 1
        return SessionReadResult(snapshot=self.session.snapshot())

    async def _release(self, conn: Connection, p: TurnCancelParams) -> TurnCancelResult:
        self.releases.setdefault(p.session_id, trio.Event()).set()
        return TurnCancelResult(turn_id=p.session_id)

    async def wait_held(self, count: int) -> None:
        while self.held != count:
            await self.changed.wait()

    async def handle(self, ws: WebSocket) -> None:
        conn = Connection(ws, self.handlers, queue_bytes=self.queue_bytes)
        self.connections.append(conn)
        self._changed()
        try:
            await conn.serve()
        finally:
            self.ended.append(conn)
            self._changed()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for_connections(self, count: int) -> None:
        while len(self.connections) < count:
            await self.changed.wait()


def _check(request: Request) -> tuple[int, str] | None:
    return check_upgrade(request.host, request.extra_headers, TOKEN)


@asynccontextmanager
async def running(daemonlet: Daemonlet) -> AsyncGenerator[int]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(
                serve_websocket,
                daemonlet.handle,
                HOST,
                0,
                check=_check,
                max_message_size=1024 * 1024,
            )
        )
        yield port
        nursery.cancel_scope.cancel()


def _session(tmp_path: Path) -> Session:
    row = SessionRow("s_test", "test", 0.0, 0.0, 0, None)
    # Only ephemeral events are emitted here: the store is never written.
    return Session(row, Store(tmp_path / "tether.sqlite3"))


async def _call(ws: WebSocketConnection, request_id: str, method: str, params: object) -> Any:
    await ws.send_message(request_frame(request_id, method, params).decode())
    while True:
        reply = msgspec.json.decode(await ws.get_message())
        if reply.get("id") == request_id:
            return reply


async def _hello(ws: WebSocketConnection, *, attach: bool = True) -> None:
    assert "result" in await _call(ws, "i", "initialize", {"clientName": "t"})
    if attach:
        assert "result" in await _call(ws, "a", "session/attach", {"sessionId": "s_test"})


def _emit_deltas(session: Session, count: int) -> None:
    for _ in range(count):
        session.emit(ItemDelta(turn_id="t", item_id="i", delta=DELTA))


async def test_a_client_that_never_reads_is_resynced_within_its_budget_and_a_fast_one_is_not(
    tmp_path: Path,
) -> None:
    session = _session(tmp_path)
    daemonlet = Daemonlet(session)
    fast_seqs: list[int] = []
    fast_other: list[str] = []
    with trio.fail_after(30):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as fast,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as slow,
        ):
            await _hello(fast)
            await _hello(slow)
            fast_conn, slow_conn = daemonlet.connections

            # Nothing is queued for either: the event goes straight to both sockets.
            _emit_deltas(session, 1)
            assert len(fast_conn.outbox) == len(slow_conn.outbox) == 0
            fast_seqs.append(msgspec.json.decode(await fast.get_message())["params"]["seq"])

            # `slow` reads nothing from here on; `fast` reads everything, batch by batch.
            while slow_conn in session.subscribers:
                _emit_deltas(session, 8)
                while len(fast_seqs) < session.seq:
                    frame = msgspec.json.decode(await fast.get_message())
                    if frame.get("method") == "session/event":
                        fast_seqs.append(frame["params"]["seq"])
                    else:
                        fast_other.append(frame.get("method"))
                assert slow_conn.outbox.statistics().bytes <= BUDGET

            assert fast_conn in session.subscribers
            assert fast_seqs == list(range(1, session.seq + 1))
            assert fast_other == []
            stats = slow_conn.outbox.statistics()
            assert stats.peak_bytes <= BUDGET
            # The budget was reached, not the frame count limit.
            assert stats.peak_bytes > BUDGET // 2
            assert not slow_conn.outbox.overrun

            # Now `slow` reads: a gap-free prefix of the stream, its waiting deltas merged
            # (each frame stands for `firstSeq`..`seq`), then the resync notice.
            slow_seqs: list[int] = []
            merged = 0
            while True:
                frame = msgspec.json.decode(await slow.get_message())
                if frame.get("method") == "session/resync":
                    break
                seq = frame["params"]["seq"]
                first = frame["params"].get("firstSeq", seq)
                merged += first < seq
                slow_seqs.extend(range(first, seq + 1))
            assert slow_seqs == list(range(1, len(slow_seqs) + 1))
            assert len(slow_seqs) < session.seq
            assert merged


class RawClient:
    """A websocket client over a bare TCP stream (wsproto), for a client that stops reading:
    unlike trio-websocket's, its socket is closed however the server ends the connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)

    @classmethod
    @asynccontextmanager
    async def connect(cls, port: int) -> AsyncGenerator["RawClient"]:
        stream = await trio.open_tcp_stream(HOST, port)
        async with stream:
            client = cls(stream)
            headers = [(b"authorization", f"Bearer {TOKEN}".encode())]
            await stream.send_all(
                client.ws.send(WsRequest(host=f"{HOST}:{port}", target="/", extra_headers=headers))
            )
            while not any(isinstance(e, AcceptConnection) for e in client.ws.events()):
                client.ws.receive_data(await stream.receive_some(65536))
            yield client

    async def send(self, frame: bytes) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(data=frame.decode())))

    async def wait_cut_off(self) -> None:
        """Read until the server has closed the TCP connection (EOF, or a reset when it
        closed with our requests still unread)."""
        try:
            while await self.stream.receive_some(1 << 20):
                pass
        except trio.BrokenResourceError:
            pass


async def test_a_client_that_never_reads_its_answers_is_disconnected_within_its_budget(
    tmp_path: Path,
) -> None:
    session = _session(tmp_path)
    daemonlet = Daemonlet(session)
    with trio.fail_after(30):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as fast,
            RawClient.connect(port) as slow,
        ):
            await _hello(fast)
            await slow.send(request_frame("i", "initialize", {"clientName": "slow"}))
            await daemonlet.wait_for_connections(2)
            fast_conn, slow_conn = daemonlet.connections
            sent = 0
            while slow_conn not in daemonlet.ended:
                sent += 1
                try:
                    await slow.send(request_frame(f"big{sent}", "tools/list", {}))
                except trio.BrokenResourceError:
                    break  # cut off between two requests
                await trio.lowlevel.checkpoint()  # let the daemon read it
                assert slow_conn.outbox.statistics().bytes <= BUDGET
            while slow_conn not in daemonlet.ended:
                await daemonlet.changed.wait()
            assert slow_conn.outbox.overrun
            assert slow_conn.outbox.statistics().peak_bytes <= BUDGET
            assert sent * 60_000 > BUDGET
            await slow.wait_cut_off()
            # The other client on the same daemon and session is unaffected.
            _emit_deltas(session, 3)
            seqs = [msgspec.json.decode(await fast.get_message())["params"]["seq"] for _ in "abc"]
            assert seqs == [1, 2, 3]
            assert fast_conn not in daemonlet.ended


# --- the outbox alone ---------------------------------------------------------------------------


async def test_outbox_counts_a_batch_until_it_is_written() -> None:
    outbox = Outbox(max_bytes=1000, reserve=100)
    assert outbox.offer(b"a" * 400)
    assert outbox.offer(b"b" * 400)
    assert not outbox.offer(b"c" * 101)  # would leave less than the reserve free
    assert outbox.statistics().bytes == 800
    batch = await outbox.get_batch()
    assert batch == [b"a" * 400, b"b" * 400]
    # Taken by the writer but not yet written: still held.
    assert outbox.statistics().bytes == 800
    assert not outbox.offer(b"c" * 101)
    outbox.send_nowait(b"r" * 150)  # a response may use the reserve
    outbox.batch_written()
    assert outbox.statistics().bytes == 150
    assert outbox.offer(b"c" * 101)
    assert outbox.statistics().peak_bytes == 950


async def test_outbox_overruns_on_a_response_past_the_budget() -> None:
    outbox = Outbox(max_bytes=1000, reserve=100)
    outbox.send_nowait(b"a" * 900)
    outbox.send_nowait(b"b" * 101)
    assert outbox.overrun
    assert outbox.closed
    assert outbox.statistics().bytes == 0
    with trio.fail_after(1):
        await outbox.wait_overrun()


async def test_outbox_takes_one_frame_larger_than_the_budget_when_empty() -> None:
    # Otherwise a large answer (a long session's snapshot) could never be sent.
    outbox = Outbox(max_bytes=1000)
    outbox.send_nowait(b"s" * 5000)
    assert not outbox.overrun
    assert await outbox.get_batch() == [b"s" * 5000]


async def test_outbox_takes_a_live_frame_past_the_live_part_only_when_nothing_is_held() -> None:
    # The completed copy of a long message may be more than live events may take (900 here).
    outbox = Outbox(max_bytes=1000, reserve=100)
    assert outbox.offer(b"c" * 950)
    assert not outbox.offer(b"d")  # now something is held: the client is resynced
    assert not Outbox(max_bytes=1000, reserve=100).offer(b"e" * 1001)  # past the whole budget


async def test_outbox_leaves_a_replay_half_the_budget() -> None:
    outbox = Outbox(max_bytes=1000, reserve=100)
    assert outbox.replay_room() == 500
    assert outbox.offer(b"a" * 300)
    assert outbox.replay_room() == 200
    assert outbox.offer(b"b" * 300)
    assert outbox.replay_room() == 0


async def test_outbox_bounds_live_events_by_bytes_not_frames() -> None:
    outbox = Outbox(max_bytes=100_000, reserve=0)
    for _ in range(10_000):
        assert outbox.offer(b"1234567890")
    assert not outbox.offer(b"1")
    assert outbox.statistics().frames == 10_000


def _delta(seq: int, text: str, *, item: str = "i", progress: float | None = None) -> DeltaFrame:
    event = ItemDelta(
        turn_id="t",
        item_id=item,
        delta=text,
        progress=None if progress is None else ToolProgress(progress=progress),
    )
    params = SessionEventParams(session_id="s", epoch="e", seq=seq, event=event)
    frame = notification_frame("session/event", params)
    return DeltaFrame(frame, session_id="s", epoch="e", seq=seq, event=event)


def _offer(outbox: Outbox, delta: DeltaFrame) -> bool:
    return outbox.offer(delta.frame, delta)


async def _taken(outbox: Outbox) -> list[SessionEventParams]:
    batch = await outbox.get_batch()
    return [decode_event(frame) for frame in batch]


async def test_outbox_merges_waiting_deltas_of_one_item_in_order() -> None:
    outbox = Outbox(max_bytes=1_000_000)
    renamed = SessionEventParams(session_id="s", epoch="e", seq=9, event=SessionRenamed(title="x"))
    other = notification_frame("session/event", renamed)
    assert all(_offer(outbox, _delta(seq, f"{seq},")) for seq in range(1, 5))
    assert _offer(outbox, _delta(5, "", progress=1))  # a progress report: a run of its own
    assert _offer(outbox, _delta(6, "", progress=2))
    assert _offer(outbox, _delta(7, "b", item="j"))  # another item: a run of its own
    assert _offer(outbox, _delta(8, "9,"))  # not right behind item i's run: not merged
    assert outbox.offer(other)  # any other frame ends a run
    assert _offer(outbox, _delta(10, "10"))
    assert len(outbox) == 6
    got = await _taken(outbox)
    assert [(p.first_seq, p.seq) for p in got] == [
        (1, 4),
        (5, 6),
        (None, 7),
        (None, 8),
        (None, 9),
        (None, 10),
    ]
    first, progress = got[0].event, got[1].event
    assert isinstance(first, ItemDelta)
    assert first.delta == "1,2,3,4,"
    assert isinstance(progress, ItemDelta)
    assert progress.delta == ""
    assert progress.progress == ToolProgress(progress=2)  # the latest report stands


async def test_a_merged_run_counts_its_text_against_the_budget_and_stops_at_its_cap() -> None:
    outbox = Outbox(max_bytes=2 * MAX_MERGED_BYTES, reserve=0)
    chunk = "x" * 1000
    seq = 0
    while outbox.statistics().bytes + len(chunk) <= 2 * MAX_MERGED_BYTES:
        seq += 1
        assert _offer(outbox, _delta(seq, chunk))
    # The budget is spent on text: the next delta is refused (the session resyncs).
    assert not _offer(outbox, _delta(seq + 1, chunk))
    assert outbox.statistics().bytes <= 2 * MAX_MERGED_BYTES
    frames = await outbox.get_batch()
    assert 2 <= len(frames) <= 3  # a run stops growing at its cap; the next starts another
    assert all(len(frame) <= MAX_MERGED_BYTES + 200 for frame in frames)
    params = [decode_event(frame) for frame in frames]
    covered = [n for p in params for n in range(p.first_seq or p.seq, p.seq + 1)]
    assert covered == list(range(1, seq + 1))
    text = "".join(p.event.delta for p in params if isinstance(p.event, ItemDelta))
    assert text == chunk * seq


# --- the server ---------------------------------------------------------------------------------


async def test_a_message_over_the_size_limit_closes_with_1009(tmp_path: Path) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with running(daemonlet) as port, RawClient.connect(port) as client:
            await client.send(b"x" * (1024 * 1024 + 1))
            events: list[object] = []
            while not any(isinstance(e, CloseConnection) for e in events):
                client.ws.receive_data(await client.stream.receive_some(65536))
                events.extend(client.ws.events())
            close = events[-1]
            assert isinstance(close, CloseConnection)
            assert close.code == 1009
            # Answer it, as a client should; then the daemon ends the connection.
            await client.stream.send_all(client.ws.send(close.response()))
            await client.wait_cut_off()
            while not daemonlet.ended:
                await daemonlet.changed.wait()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([], 401),
        ([(b"authorization", b"Bearer wrong")], 401),
        ([(b"authorization", f"Bearer {TOKEN}".encode()), (b"origin", b"https://x.example")], 403),
    ],
)
async def test_refused_upgrades_get_their_status(
    tmp_path: Path, headers: list[tuple[bytes, bytes]], status: int
) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with running(daemonlet) as port, await trio.open_tcp_stream(HOST, port) as stream:
            ws = WSConnection(ConnectionType.CLIENT)
            request = WsRequest(host=f"{HOST}:{port}", target="/", extra_headers=headers)
            await stream.send_all(ws.send(request))
            events: list[object] = []
            while not any(isinstance(e, RejectData) and e.body_finished for e in events):
                ws.receive_data(await stream.receive_some(65536))
                events.extend(ws.events())
        rejection = events[0]
        assert isinstance(rejection, RejectConnection)
        assert rejection.status_code == status
        assert daemonlet.connections == []


async def test_a_request_that_is_not_an_upgrade_gets_400(tmp_path: Path) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with running(daemonlet) as port:
            stream = await trio.open_tcp_stream(HOST, port)
            async with stream:
                await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = await stream.receive_some(4096)
                    assert chunk, head
                    head += chunk
            assert head.startswith(b"HTTP/1.1 400 "), head


# --- requests that run at once ------------------------------------------------------------------


async def _send(ws: WebSocketConnection, request_id: str, method: str, params: object) -> None:
    await ws.send_message(request_frame(request_id, method, params).decode())


async def test_a_request_is_answered_while_an_earlier_one_on_the_connection_still_runs(
    tmp_path: Path,
) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as ws,
        ):
            await _hello(ws, attach=False)
            # `session/read` waits here until `turn/cancel` releases it: answered in order,
            # one at a time, neither would ever be.
            await _send(ws, "held", "session/read", {"sessionId": "x"})
            await _send(ws, "release", "turn/cancel", {"sessionId": "x"})
            first = msgspec.json.decode(await ws.get_message())
            second = msgspec.json.decode(await ws.get_message())
            assert [first["id"], second["id"]] == ["release", "held"]
            assert "result" in second


async def test_cancel_request_answers_the_running_request_as_cancelled_and_nothing_else(
    tmp_path: Path,
) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as ws,
        ):
            # Before `initialize` there is nothing to cancel, and no answer.
            await ws.send_message(notification_frame("$/cancelRequest", {"id": 1}).decode())
            await _hello(ws, attach=False)
            await _send(ws, "held", "session/read", {"sessionId": "x"})
            await daemonlet.wait_held(1)
            # The id is taken while its request runs.
            reused = await _call(ws, "held", "turn/cancel", {"sessionId": "y"})
            assert reused["error"]["code"] == ErrorCode.INVALID_REQUEST
            for params in ({"id": "other"}, {"id": [1]}, {}, "nonsense"):
                await ws.send_message(notification_frame("$/cancelRequest", params).decode())
            assert daemonlet.held == 1
            await ws.send_message(notification_frame("$/cancelRequest", {"id": "held"}).decode())
            cancelled = msgspec.json.decode(await ws.get_message())
            assert cancelled == {
                "jsonrpc": "2.0",
                "id": "held",
                "error": {"code": -32800, "message": "session/read was cancelled"},
            }
            assert daemonlet.held == 0
            # Answered requests cannot be cancelled; the id is free again. Sent as a request,
            # `$/cancelRequest` gets an empty result.
            answer = await _call(ws, "c", "$/cancelRequest", {"id": "held"})
            assert answer == {"jsonrpc": "2.0", "id": "c", "result": {}}
            again = await _call(ws, "held", "turn/cancel", {"sessionId": "y"})
            assert again["result"] == {"turnId": "y"}


async def test_past_the_requests_in_flight_the_connection_reads_on_only_when_one_ends(
    tmp_path: Path,
) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as ws,
        ):
            await _hello(ws, attach=False)
            for n in range(MAX_REQUESTS_IN_FLIGHT + 1):
                await _send(ws, f"r{n}", "session/read", {"sessionId": f"s{n}"})
            await daemonlet.wait_held(MAX_REQUESTS_IN_FLIGHT)
            await trio.testing.wait_all_tasks_blocked()
            assert daemonlet.started == [f"s{n}" for n in range(MAX_REQUESTS_IN_FLIGHT)]
            daemonlet.releases["s0"].set()
            assert msgspec.json.decode(await ws.get_message())["id"] == "r0"
            await daemonlet.wait_held(MAX_REQUESTS_IN_FLIGHT)
            assert daemonlet.started[-1] == f"s{MAX_REQUESTS_IN_FLIGHT}"
            for n in range(1, MAX_REQUESTS_IN_FLIGHT + 1):
                daemonlet.releases[f"s{n}"].set()
            ids = {msgspec.json.decode(await ws.get_message())["id"] for _ in range(16)}
            assert ids == {f"r{n}" for n in range(1, MAX_REQUESTS_IN_FLIGHT + 1)}


async def test_a_frame_the_socket_takes_in_part_is_finished_before_anything_else() -> None:
    """The direct path writes what the socket takes at once; the rest goes out first with the
    next send, so a frame queued behind it and a ping the daemon sends arrive whole, after it."""
    big = b'"' + b"x" * (2 * 1024 * 1024) + b'"'
    accepted: list[WebSocket] = []
    arrived = trio.Event()
    release = trio.Event()

    async def handle(ws: WebSocket) -> None:
        accepted.append(ws)
        arrived.set()
        await release.wait()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(
                    serve_websocket,
                    handle,
                    HOST,
                    0,
                    check=_check,
                    max_message_size=1024 * 1024,
                )
            )
            async with open_websocket(
                HOST,
                port,
                "/",
                use_ssl=False,
                extra_headers=AUTH,
                max_message_size=8 << 20,
                disconnect_timeout=1,
            ) as client:
                await arrived.wait()
                server = accepted[0]
                outbox = Outbox(direct=server)
                # Larger than any loopback socket buffer: the socket takes only a part.
                outbox.send_nowait(big)
                assert server.has_unsent
                outbox.send_nowait(b'"after"')
                assert len(outbox) == 1
                assert not server.write_nowait(b'"jumps the queue"')

                async def write() -> None:
                    await server.send_text_frames(await outbox.get_batch())

                nursery.start_soon(write)
                assert await client.get_message() == big.decode()
                assert await client.get_message() == '"after"'
                assert not server.has_unsent
                outbox.batch_written()  # what the writer does when it comes back for more
                # The socket is empty again: the next frame goes straight out.
                outbox.send_nowait(b'"direct"')
                assert len(outbox) == 0
                assert await client.get_message() == '"direct"'
                release.set()
            nursery.cancel_scope.cancel()


async def test_a_binary_frame_is_refused_unread_and_the_connection_serves_on(
    tmp_path: Path,
) -> None:
    daemonlet = Daemonlet(_session(tmp_path))
    with trio.fail_after(10):
        async with (
            running(daemonlet) as port,
            open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as ws,
        ):
            # A request in a binary frame, with bytes in it that are not UTF-8.
            await ws.send_message(b'{"jsonrpc":"2.0","id":"b","method":"initialize","x":"\xff"}')
            refusal = msgspec.json.decode(await ws.get_message())
            assert refusal["id"] is None
            assert refusal["error"]["code"] == ErrorCode.INVALID_REQUEST
            assert "text frame" in refusal["error"]["message"]
            await _hello(ws, attach=False)
