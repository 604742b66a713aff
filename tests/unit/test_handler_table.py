"""The daemon's handler table against the protocol's method descriptors.

At run time: the table names every method of `METHODS` exactly once, and a connection serving it
(over a real websocket on 127.0.0.1) dispatches every one of them. At type-check time
(basedpyright strict, over the whole tree): `typing_contract` holds calls and handlers to their
descriptors; each `pyright: ignore` there marks an error the checker must keep finding, since
an ignore that no longer hides an error is itself reported.
"""
# pyright: reportUnnecessaryTypeIgnoreComment=true

from functools import partial
from pathlib import Path
from typing import Any, assert_type

import msgspec
import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket
from wsproto.events import Request

from tether.clients.core.rpc import Client
from tether.daemon.lsp.pool import LspPool
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.connection import Connection, Reply, on
from tether.daemon.rpc.handlers import Handlers, handler_table
from tether.daemon.rpc.security import check_upgrade
from tether.daemon.rpc.websocket import WebSocket, serve_websocket
from tether.daemon.sessions.registry import Sessions
from tether.daemon.workspace_trust import WorkspaceTrust
from tether.protocol import methods
from tether.protocol.errors import ErrorCode
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    DAEMON_STATUS,
    INITIALIZE,
    METHODS,
    SESSION_ATTACH,
    SESSION_LIST,
    SESSION_READ,
    DaemonStatusResult,
    Empty,
    Method,
    SessionAttachParams,
    SessionAttachResult,
    SessionListResult,
    SessionReadResult,
    SessionRef,
    TurnCancelParams,
)

HOST = "127.0.0.1"
TOKEN = "t" * 64


class Unwired(Exception):
    """A part of the daemon this test does not build was used."""


class BareDaemon:
    """A `DaemonState` with a workspace and no parts: a handler that needs one raises
    `Unwired`, which the connection answers as an internal error."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.started_at = 0.0
        self.idle_timeout = 60.0
        self.connections: set[Connection] = set()
        self.shutdowns: list[str] = []

    @property
    def sessions(self) -> Sessions:
        raise Unwired("sessions")

    @property
    def processes(self) -> ProcessTable:
        raise Unwired("processes")

    @property
    def lsp(self) -> LspPool:
        raise Unwired("lsp")

    @property
    def trust(self) -> WorkspaceTrust:
        raise Unwired("trust")

    def request_shutdown(self, reason: str) -> None:
        self.shutdowns.append(reason)


def test_methods_holds_every_descriptor_once() -> None:
    declared = [value.name for value in vars(methods).values() if isinstance(value, Method)]
    assert sorted(declared) == sorted(METHODS)
    with pytest.raises(ValueError, match="declared twice"):
        methods._declare("initialize", Empty, Empty, "Again.")
    assert METHODS["initialize"] is INITIALIZE


def test_the_daemons_table_covers_exactly_the_descriptors(tmp_path: Path) -> None:
    assert set(Handlers(BareDaemon(tmp_path)).table()) == set(METHODS)


async def _read(conn: Connection, params: SessionRef) -> SessionReadResult:
    raise AssertionError("not called")


async def _list(conn: Connection, params: Empty) -> SessionListResult:
    return SessionListResult(sessions=[])


def test_a_table_that_misses_repeats_or_invents_a_method_is_refused() -> None:
    full = list(Handlers(BareDaemon(Path("/"))).table().items())
    with pytest.raises(ValueError, match=r"missing \['session/read'\]"):
        handler_table(*[entry for entry in full if entry[0] != "session/read"])
    with pytest.raises(ValueError, match=r"repeated \['session/list'\]"):
        handler_table(*full, on(SESSION_LIST, _list))
    invented = Method("session/juggle", SessionRef, Empty, "Not a method of the protocol.")

    async def juggle(conn: Connection, params: SessionRef) -> Empty:
        return Empty()

    with pytest.raises(ValueError, match=r"not in METHODS \['session/juggle'\]"):
        handler_table(*full, on(invented, juggle))


async def _call(
    ws: WebSocketConnection, request_id: str, method: str, params: object
) -> dict[str, Any]:
    await ws.send_message(request_frame(request_id, method, params).decode())
    while True:
        reply: dict[str, Any] = msgspec.json.decode(await ws.get_message())
        if reply.get("id") == request_id:
            return reply


async def test_a_connection_serving_the_table_dispatches_every_method(tmp_path: Path) -> None:
    daemon = BareDaemon(tmp_path)
    table = Handlers(daemon).table()

    async def serve(ws: WebSocket) -> None:
        await Connection(ws, table).serve()

    def check(request: Request) -> tuple[int, str] | None:
        return check_upgrade(request.host, request.extra_headers, TOKEN)

    auth = [(b"authorization", f"Bearer {TOKEN}".encode())]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(serve_websocket, serve, HOST, 0, check=check, max_message_size=1 << 20)
            )
            async with open_websocket(HOST, port, "/", use_ssl=False, extra_headers=auth) as ws:
                hello = await _call(ws, "i", "initialize", {"clientName": "t"})
                assert hello["result"]["workspace"] == str(tmp_path)
                answers = {
                    name: await _call(ws, f"r{index}", name, {})
                    for index, name in enumerate(METHODS)
                    if name != "initialize"
                }
                unknown = await _call(ws, "u", "session/juggle", {})
            nursery.cancel_scope.cancel()
    # With empty params a method either fails validation of its own params type, reaches its
    # handler (and this bare daemon), or answers; never is it unknown.
    codes = {name: answer.get("error", {}).get("code") for name, answer in answers.items()}
    assert ErrorCode.METHOD_NOT_FOUND not in codes.values(), codes
    assert codes["daemon/shutdown"] is None
    assert codes["session/list"] == ErrorCode.INTERNAL_ERROR  # it reached `sessions`
    assert codes["session/read"] == ErrorCode.INVALID_PARAMS  # decoded as a SessionRef
    assert daemon.shutdowns == ["requested by a client"]
    assert unknown["error"]["code"] == ErrorCode.METHOD_NOT_FOUND


def typing_contract(client: Client) -> None:
    """Never run: the type checker reads it."""
    assert_type(client.call(DAEMON_STATUS), DaemonStatusResult)
    assert_type(client.call(SESSION_READ, SessionRef(session_id="s")), SessionReadResult)
    client.call(SESSION_READ, TurnCancelParams(session_id="s"))  # pyright: ignore[reportArgumentType]
    client.call(SESSION_READ)  # pyright: ignore[reportArgumentType]
    client.call(INITIALIZE)  # pyright: ignore[reportArgumentType]

    async def attach(conn: Connection, params: SessionAttachParams) -> Reply[SessionAttachResult]:
        raise AssertionError("not called")

    on(SESSION_ATTACH, attach)
    on(SESSION_READ, _list)  # pyright: ignore[reportArgumentType]
    on(SESSION_LIST, _read)  # pyright: ignore[reportArgumentType]
    on(SESSION_READ, attach)  # pyright: ignore[reportArgumentType]
