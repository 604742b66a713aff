"""Clients that read slower than a fast model streams, in-process: the daemon's handlers over
real `Sessions`, the scripted model server over HTTP, the daemon's websocket server on
127.0.0.1 and websocket clients over plain TCP sockets (wsproto) on the other end.

A client that "pauses" reads nothing: its socket, given a small receive buffer, fills, and
TCP backpressure leaves the rest in the daemon's outbox for that client. A "slow" client reads
one frame each time the continuous reader has read a batch more.

What every client must see, whatever its pace: each seq once and in order (a merged delta
counts for `firstSeq`..`seq`), the answer's text exactly once, and `session/resync` only when
its byte budget ran out.
"""

import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Ping, TextMessage
from wsproto.events import Request as WsRequest

from tests.inprocess import Watcher, running_sessions, seqs_covered
from tests.support import numbered
from tests.unit.test_handlers import DaemonParts
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.connection import Connection
from tether.daemon.rpc.handlers import Handlers
from tether.daemon.rpc.outbox import DEFAULT_MAX_BYTES
from tether.daemon.rpc.security import check_upgrade
from tether.daemon.rpc.websocket import WebSocket, serve_websocket
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.store import Store
from tether.protocol.events import AnyEvent, ItemCompleted, ItemDelta, TurnCompleted
from tether.protocol.items import AgentMessage
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import SessionAttachResult, SessionEventParams
from tether.testing import ModelServer

HOST = "127.0.0.1"
TOKEN = "t" * 64
ANSWER_DELTAS = 6000
"""A fast model's long answer: more deltas than the 4,096 frames a client once had room for."""
SMALL_RECEIVE_BUFFER = 4096
"""A paused client's socket holds little, so that what it does not read waits in its outbox."""


class _Envelope(msgspec.Struct):
    id: str | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"null")
    result: msgspec.Raw = msgspec.Raw(b"null")


_envelope = msgspec.json.Decoder(_Envelope)
_event = msgspec.json.Decoder(SessionEventParams)


class WsClient:
    """One websocket client over a TCP socket of its own; it reads only when told to."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._messages: list[str] = []
        self._partial: list[str] = []
        self.events: list[SessionEventParams] = []
        self.resyncs = 0
        self.changed = trio.Event()

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, port: int, *, receive_buffer: int | None = None
    ) -> AsyncGenerator["WsClient"]:
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        await sock.connect((HOST, port))
        async with trio.SocketStream(sock) as stream:
            client = cls(stream)
            headers = [(b"authorization", f"Bearer {TOKEN}".encode())]
            await stream.send_all(
                client.ws.send(WsRequest(host=f"{HOST}:{port}", target="/", extra_headers=headers))
            )
            while not any(isinstance(e, AcceptConnection) for e in client.ws.events()):
                client.ws.receive_data(await stream.receive_some(65536))
            yield client

    async def _message(self) -> str:
        while not self._messages:
            data = await self.stream.receive_some(65536)
            assert data, "the daemon closed the connection"
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, Ping):
                    await self.stream.send_all(self.ws.send(event.response()))
                elif isinstance(event, TextMessage):
                    self._partial.append(event.data)
                    if event.message_finished:
                        self._messages.append("".join(self._partial))
                        self._partial = []
        return self._messages.pop(0)

    async def read_one(self) -> _Envelope:
        """Read the next message; a notification is recorded as it comes."""
        message = _envelope.decode(await self._message())
        if message.method == "session/event":
            self.events.append(_event.decode(message.params))
        elif message.method == "session/resync":
            self.resyncs += 1
        self.changed.set()
        self.changed = trio.Event()
        return message

    async def call(self, method: str, **params: Any) -> msgspec.Raw:
        """Send a request and read up to its answer (notifications before it are recorded)."""
        request_id = f"r{len(self.events)}-{method}"
        await self.stream.send_all(
            self.ws.send(TextMessage(data=request_frame(request_id, method, params).decode()))
        )
        while True:
            message = await self.read_one()
            if message.id == request_id:
                assert message.result != msgspec.Raw(b"null"), message
                return message.result

    async def attach(self, session_id: str, **params: Any) -> SessionAttachResult:
        raw = await self.call("session/attach", sessionId=session_id, **params)
        return msgspec.json.decode(raw, type=SessionAttachResult)

    @property
    def done(self) -> bool:
        return bool(self.events) and isinstance(self.events[-1].event, TurnCompleted)

    async def read_to_turn_end(self) -> None:
        """Read up to the turn's end, or to a `session/resync` (no more events come then)."""
        resyncs = self.resyncs
        while not self.done and self.resyncs == resyncs:
            await self.read_one()

    def covered(self) -> int:
        return len(seqs_covered(self.events))


@asynccontextmanager
async def daemon(
    tmp_path: Path, store: Store, server: ModelServer, *, queue_bytes: int = DEFAULT_MAX_BYTES
) -> AsyncGenerator[tuple[int, Sessions]]:
    """The daemon's handlers served on 127.0.0.1, each connection with `queue_bytes`."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    processes = ProcessTable(record=tmp_path / "processes.json")
    async with running_sessions(store, workspace, server) as sessions:
        table = Handlers(DaemonParts(workspace, sessions, processes)).table()

        async def handle(ws: WebSocket) -> None:
            await Connection(ws, table, queue_bytes=queue_bytes).serve()

        def check(request: WsRequest) -> tuple[int, str] | None:
            return check_upgrade(request.host, request.extra_headers, TOKEN)

        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(serve_websocket, handle, HOST, 0, check=check, max_message_size=1 << 20)
            )
            yield port, sessions
            nursery.cancel_scope.cancel()


async def _session(client: WsClient) -> str:
    await client.call("initialize", clientName="lagging")
    raw = await client.call("session/create")
    session_id: str = msgspec.json.decode(raw)["session"]["id"]
    return session_id


def _text(events: list[SessionEventParams]) -> str:
    """The answer as its deltas build it."""
    return "".join(e.event.delta for e in events if isinstance(e.event, ItemDelta))


def _answer(events: list[SessionEventParams]) -> list[str]:
    return [
        e.event.item.text
        for e in events
        if isinstance(e.event, ItemCompleted) and isinstance(e.event.item, AgentMessage)
    ]


def _merged(events: list[SessionEventParams]) -> int:
    return sum(e.first_seq is not None for e in events)


async def test_slow_and_paused_clients_get_a_fast_answer_merged_without_resync(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    answer = numbered(ANSWER_DELTAS)
    model_server.set_script({"steps": [{"text": answer, "chunks": ANSWER_DELTAS}]})
    with trio.fail_after(60):
        async with (
            daemon(tmp_path, sqlite_store, model_server) as (port, sessions),
            WsClient.connect(port) as fast,
            WsClient.connect(port, receive_buffer=SMALL_RECEIVE_BUFFER) as slow,
            WsClient.connect(port, receive_buffer=SMALL_RECEIVE_BUFFER) as paused,
        ):
            session_id = await _session(fast)
            for client in (fast, slow, paused):
                if client is not fast:
                    await client.call("initialize", clientName="lagging")
                attached = await client.attach(session_id)
                assert (attached.mode, attached.from_seq) == ("snapshot", 0)
            await fast.call("turn/start", sessionId=session_id, text="go")

            async def read_slowly() -> None:
                # One frame each time `fast` has read 50 more, then the rest once it is done.
                while not slow.done and not slow.resyncs:
                    await slow.read_one()
                    seen = len(fast.events)
                    while not fast.done and len(fast.events) < seen + 50:
                        await fast.changed.wait()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(fast.read_to_turn_end)
                nursery.start_soon(read_slowly)
            await sessions.wait_idle(session_id)
            # `paused` has read nothing since the turn started; now it reads it all.
            await paused.read_to_turn_end()

    for client in (fast, slow, paused):
        assert client.resyncs == 0
        covered = seqs_covered(client.events)
        assert covered == list(range(1, len(covered) + 1))
        assert len(covered) == fast.events[-1].seq
        assert _text(client.events) == answer
        assert _answer(client.events) == [answer]
    # The lagging ones got the same events, their waiting deltas merged.
    assert _merged(paused.events) > 0
    assert len(paused.events) < len(fast.events)
    assert _merged(slow.events) > 0


async def test_a_client_paused_past_its_byte_budget_is_resynced_and_catches_up_from_a_snapshot(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    budget = 160 * 1024
    width = 30
    chunks = ANSWER_DELTAS // 3
    held_at = chunks // 2
    # Three answers of 60 KB, each followed by a tool call: the paused client misses the
    # first two (their deltas and completed messages, 240 KB, are more than its budget),
    # while the rest of the third and its completed message fit it with room to spare (and
    # the turn stays short of compacting its context).
    answers = [
        "".join(f"<{step}:{i:04d}>".ljust(width, ".") for i in range(chunks)) for step in range(3)
    ]
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    model_server.set_script(
        {
            "steps": [
                {"text": answers[0], "chunks": chunks, **listing},
                {"text": answers[1], "chunks": chunks, **listing},
                {"text": answers[2], "chunks": chunks, "hold_at_chunks": [held_at]},
            ]
        }
    )
    assert 2 * len(answers[0] + answers[1]) > budget
    with trio.fail_after(60):
        async with (
            daemon(tmp_path, sqlite_store, model_server, queue_bytes=budget) as (port, sessions),
            WsClient.connect(port) as control,
            WsClient.connect(port, receive_buffer=SMALL_RECEIVE_BUFFER) as paused,
        ):
            session_id = await _session(control)
            await control.call("session/configure", sessionId=session_id, permissionMode="auto")
            await paused.call("initialize", clientName="paused")
            attached = await paused.attach(session_id)
            watcher = Watcher()
            session = await sessions.get(session_id)
            session.attach(watcher, "observer", None)
            await control.call("turn/start", sessionId=session_id, text="go")
            streamed = 0

            def at_the_hold(event: AnyEvent) -> bool:
                nonlocal streamed
                streamed += isinstance(event, ItemDelta)
                return streamed == 2 * chunks + held_at

            await watcher.wait_for(at_the_hold)

            # `paused` has read nothing since; now it reads: a gap-free prefix, its deltas
            # merged, then the notice.
            while paused.resyncs == 0:
                await paused.read_one()
            prefix = list(paused.events)
            covered = seqs_covered(prefix)
            assert covered == list(range(attached.from_seq + 1, covered[-1] + 1))
            assert "".join(answers).startswith(_text(prefix))
            assert _merged(prefix) > 0
            cursor = prefix[-1]

            # Re-attached with its cursor: what it missed is more than it has room for, so
            # it gets a snapshot of the turn so far, then the live events after it.
            again = await paused.attach(
                session_id, after={"epoch": cursor.epoch, "seq": cursor.seq}
            )
            assert again.mode == "snapshot"
            assert again.snapshot is not None
            assert again.from_seq == again.snapshot.seq > cursor.seq
            messages = [i for i in again.snapshot.turns[-1].items if isinstance(i, AgentMessage)]
            assert [m.text for m in messages] == [*answers[:2], answers[2][: held_at * width]]
            paused.events.clear()
            model_server.release()
            await paused.read_to_turn_end()
            await sessions.wait_idle(session_id)

    rest = paused.events
    covered = seqs_covered(rest)
    assert covered == list(range(again.from_seq + 1, session.seq + 1))
    assert messages[-1].text + _text(rest) == answers[2]  # nothing lost, nothing twice
    assert _answer(rest) == [answers[2]]
    assert paused.resyncs == 1
