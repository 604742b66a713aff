"""Requests on one connection of the real daemon parts, in-process: `Handlers` over real
`Sessions`, the real store, the scripted model server over HTTP, and each client a
trio-websocket connection (an independent implementation) to the daemon's server on
127.0.0.1. A model call that must still be running when the test acts on it is a script step
with a long delay, which the test never waits out."""

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import trio
from trio_websocket import WebSocketConnection, open_websocket
from wsproto.events import Request

from tests.inprocess import running_sessions
from tests.unit.test_handlers import DaemonParts
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.connection import Connection
from tether.daemon.rpc.handlers import Handlers
from tether.daemon.rpc.security import check_upgrade
from tether.daemon.rpc.websocket import WebSocket, serve_websocket
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode
from tether.protocol.jsonrpc import notification_frame, request_frame
from tether.testing import ModelServer

HOST = "127.0.0.1"
TOKEN = "t" * 64
AUTH = [(b"authorization", f"Bearer {TOKEN}".encode())]
NEVER = 600_000
"""A model step's delay that no test waits out (the server ends it when it stops)."""
ASK_TWICE = {
    "tool_calls": [
        {"name": "run_command", "arguments": {"command": f"echo {n}", "description": "say it"}}
        for n in (1, 2)
    ]
}
"""A step of two calls that each ask for approval (mode `edits`), one after the other."""
LONG_REQUEST = "please look into the greeting; " + "here is some background. " * 80
"""A first message long enough for `session/compact` to have something to summarise."""


def _check(request: Request) -> tuple[int, str] | None:
    return check_upgrade(request.host, request.extra_headers, TOKEN)


@asynccontextmanager
async def daemon(tmp_path: Path, store: Store, server: ModelServer) -> AsyncGenerator[int]:
    """The daemon's handlers served on a port of 127.0.0.1; yields the port."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    processes = ProcessTable(record=tmp_path / "processes.json")
    async with running_sessions(store, workspace, server) as sessions:
        table = Handlers(DaemonParts(workspace, sessions, processes)).table()

        async def handle(ws: WebSocket) -> None:
            await Connection(ws, table).serve()

        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(serve_websocket, handle, HOST, 0, check=_check, max_message_size=1 << 20)
            )
            yield port
            nursery.cancel_scope.cancel()


class Peer:
    """One client connection; keeps every message it receives, in order."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []
        self._next = 0

    async def send(self, request_id: str, method: str, **params: Any) -> None:
        await self.ws.send_message(request_frame(request_id, method, params).decode())

    async def notify(self, method: str, **params: Any) -> None:
        await self.ws.send_message(notification_frame(method, params).decode())

    async def call(self, request_id: str, method: str, **params: Any) -> dict[str, Any]:
        await self.send(request_id, method, **params)
        return await self.answer(request_id)

    async def answer(self, request_id: str) -> dict[str, Any]:
        """The response to `request_id` (read on to it when it has not arrived yet)."""
        _, message = await self._first(lambda m: m.get("id") == request_id and "method" not in m, 0)
        return message

    async def event(self, session_id: str, kind: str) -> dict[str, Any]:
        """The next `session/event` of `kind` of that session from where the last search
        ended."""
        self._next, message = await self._first(
            lambda m: (
                m.get("method") == "session/event"
                and m["params"]["sessionId"] == session_id
                and m["params"]["event"]["type"] == kind
            ),
            self._next,
        )
        return message["params"]["event"]

    async def _first(
        self, found: Callable[[dict[str, Any]], bool], index: int
    ) -> tuple[int, dict[str, Any]]:
        """The first message from `index` on that `found` accepts, and the index after it."""
        while True:
            while index < len(self.received):
                message = self.received[index]
                index += 1
                if found(message):
                    return index, message
            self.received.append(msgspec.json.decode(await self.ws.get_message()))

    def seqs(self, session_id: str) -> list[int]:
        return [
            m["params"]["seq"]
            for m in self.received
            if m.get("method") == "session/event" and m["params"]["sessionId"] == session_id
        ]


@asynccontextmanager
async def peer(port: int, **initialize: Any) -> AsyncGenerator[Peer]:
    async with open_websocket(HOST, port, "/", use_ssl=False, extra_headers=AUTH) as ws:
        client = Peer(ws)
        answer = await client.call("i", "initialize", clientName="test", **initialize)
        assert "result" in answer, answer
        yield client


async def test_approvals_and_cancels_are_answered_while_a_compaction_waits_then_cancelled(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                {"text": "sure"},  # the turn of session B that gives it history
                ASK_TWICE,  # session A's turn asks for approval twice
                {"text": "## summary", "delay_ms": NEVER},  # B's compaction: never answered
            ]
        }
    )
    with trio.fail_after(30):
        async with daemon(tmp_path, sqlite_store, model_server) as port, peer(port) as client:
            a = (await client.call("ca", "session/create"))["result"]["session"]["id"]
            b = (await client.call("cb", "session/create"))["result"]["session"]["id"]
            await client.call("aa", "session/attach", sessionId=a)
            await client.call("ab", "session/attach", sessionId=b)
            await client.call("tb", "turn/start", sessionId=b, text=LONG_REQUEST)
            assert (await client.event(b, "turn_completed"))["status"] == "completed"
            started = await client.call("ta", "turn/start", sessionId=a, text="go")
            approval = await client.event(a, "approval_requested")

            await client.send("compact", "session/compact", sessionId=b)
            await client.event(b, "turn_started")
            denied = await client.call(
                "deny",
                "approval/respond",
                sessionId=a,
                approvalId=approval["approval"]["id"],
                decision="deny",
            )
            assert denied == {"jsonrpc": "2.0", "id": "deny", "result": {}}
            await client.event(a, "approval_requested")
            cancelled = await client.call("cancel", "turn/cancel", sessionId=a)
            assert cancelled["result"]["turnId"] == started["result"]["turnId"]
            assert (await client.event(a, "turn_completed"))["status"] == "cancelled"
            assert not [m for m in client.received if m.get("id") == "compact"]

            # Cancelling an unknown id does nothing; the compaction's id cancels it.
            await client.notify("$/cancelRequest", id="nobody")
            await client.notify("$/cancelRequest", id="compact")
            answer = await client.answer("compact")
            assert answer["error"]["code"] == ErrorCode.REQUEST_CANCELLED == -32800
            ended = await client.event(b, "turn_completed")
            assert ended["status"] == "cancelled"
            assert "error" not in ended
            # Cancelling it again, now that it was answered, does nothing either.
            await client.notify("$/cancelRequest", id="compact")
            listed = await client.call("list", "session/list")
            assert "result" in listed

            read = await client.call("rb", "session/read", sessionId=b)
            turns = read["result"]["snapshot"]["turns"]
            items = [i["type"] for t in turns for i in t.get("items", [])]
            assert "compaction" not in items
            for session_id in (a, b):
                seqs = client.seqs(session_id)
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            answered = [m["id"] for m in client.received if "id" in m and "method" not in m]
            assert answered.index("deny") < answered.index("compact")
            assert answered.index("cancel") < answered.index("compact")
            assert answered.count("compact") == 1
