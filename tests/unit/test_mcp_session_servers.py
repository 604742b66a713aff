"""The MCP servers clients give single sessions (`tether.daemon.mcp.session_servers`): real
stdio servers (tests/mcp/tiny_server.py), each session's pool beside the daemon's."""

import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support import alive
from tests.unit.test_mcp_pool import TINY
from tether.daemon.mcp.errors import McpUnavailable
from tether.daemon.mcp.pool import McpPool
from tether.daemon.mcp.session_servers import SessionServers, definitions_of
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import ToolProgress
from tether.protocol.methods import SessionMcpServer


def server(name: str) -> SessionMcpServer:
    return SessionMcpServer(name=name, command=sys.executable, args=[str(TINY)])


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncGenerator[SessionServers]:
    servers = SessionServers(McpPool(tmp_path, log_dir=tmp_path / "logs", grace=0.5))
    async with trio.open_nursery() as nursery:
        await nursery.start(servers.serve)
        yield servers
        nursery.cancel_scope.cancel()


def pids(servers: SessionServers, session_id: str) -> list[int]:
    return [
        s.pid
        for s in servers._pools[session_id].pool.status()  # the pids the daemon reports
        if s.pid is not None
    ]


async def test_a_sessions_servers_serve_it_alone_until_their_owner_lets_go(tmp_path: Path) -> None:
    holds = {"yes": True}

    def held() -> bool:
        return holds["yes"]

    with trio.fail_after(20):
        async with serving(tmp_path) as servers:
            await servers.give("s1", definitions_of([server("mine"), server("tiny")]), held=held)
            tools, problems = await servers.ensure_started("s1", taken={"tiny"})
            assert {(d.name, t.name) for d, t in tools} >= {("mine", "echo")}
            assert not [d for d, _ in tools if d.name == "tiny"]
            assert problems == [
                "The MCP server tiny given to this session is left out: your tether settings "
                "or the workspace define a server of that name"
            ]
            assert await servers.ensure_started("s2", taken=set()) == ([], [])
            call = servers.caller("s1")
            reports: list[ToolProgress] = []
            result = await call("mine", "echo", {"text": "hi"}, reports.append)
            assert result["content"] == [{"type": "text", "text": "echo: hi"}]
            (first, _) = pids(servers, "s1")

            # Given again as before: the server keeps running.
            await servers.give("s1", definitions_of([server("mine"), server("tiny")]), held=held)
            await servers.ensure_started("s1", taken={"tiny"})
            assert first in pids(servers, "s1")

            # Still held (a re-attach): kept. Let go: stopped, and calls fail at once.
            servers.release("s1")
            await trio.testing.wait_all_tasks_blocked()
            assert alive(first)
            holds["yes"] = False
            entry = servers._pools["s1"]
            servers.release("s1")
            await entry.stopped.wait()
            assert not alive(first)
            with pytest.raises(McpUnavailable, match="given to this session was stopped"):
                await call("mine", "echo", {"text": "late"}, reports.append)


async def test_an_empty_list_drops_them_and_bad_definitions_are_invalid_params(
    tmp_path: Path,
) -> None:
    with trio.fail_after(20):
        async with serving(tmp_path) as servers:
            await servers.give("s1", definitions_of([server("mine")]), held=lambda: True)
            await servers.ensure_started("s1", taken=set())
            (pid,) = pids(servers, "s1")
            await servers.give("s1", [], held=lambda: True)
            assert not alive(pid)  # `give` returns once they are stopped
    for wrong, message in [
        ([SessionMcpServer(name="", command="x")], "invalid MCP server name(s) ''"),
        ([SessionMcpServer(name="a")], "exactly one of `command` or `url`"),
    ]:
        with pytest.raises(RpcError) as error:
            definitions_of(wrong)
        assert error.value.code == ErrorCode.INVALID_PARAMS
        assert message in error.value.message
