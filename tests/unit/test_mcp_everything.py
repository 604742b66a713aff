"""tether's MCP client against the reference server, `@modelcontextprotocol/server-everything`
(tests/mcp/package.json; `npm ci --prefix tests/mcp`), over stdio and over streamable HTTP:
the fallback to the 2025-11-25 handshake it speaks, the tool list with its schemas (its
task-only tool left out), a call, its progress reports, an image and resource links as the
model sees them, a bad argument refused before the server is called; a crash quoting what
that run wrote to stderr, not an earlier run's."""

import os
import signal
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from tests.reference_mcp import EVERYTHING, NODE, Events, everything_http, needs_reference_server
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.content import McpImage, result_parts, result_text
from tether.daemon.mcp.pool import McpPool
from tether.daemon.tools.mcp import McpArguments, McpServerTool, mcp_tools
from tether.protocol.events import ToolProgress
from tether.protocol.images import sniff_image

pytestmark = needs_reference_server


@asynccontextmanager
async def pool_with(config: McpServerConfig, tmp_path: Path) -> AsyncGenerator[McpPool]:
    pool = McpPool(tmp_path, log_dir=tmp_path / "logs")
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        pool.configure([ServerDefinition(name="everything", source="user", config=config)])
        assert await pool.ensure_started() == []
        yield pool
        nursery.cancel_scope.cancel()


async def exercise(pool: McpPool) -> None:
    offered = pool.offered()
    names = [tool.name for _, tool in offered]
    assert {"echo", "get-sum", "get-tiny-image", "get-resource-links"} <= set(names)
    # It lists a tool that runs only as a task: not offered, and `tether mcp` says why.
    assert "simulate-research-query" not in names
    (left_out,) = pool.status()[0].left_out
    assert left_out.name == "simulate-research-query"
    assert 'taskSupport "required"' in left_out.reason
    tools = {tool.name: tool for tool in mcp_tools(offered, pool.call)}
    echo = tools["mcp__everything__echo"]
    assert isinstance(echo, McpServerTool)
    assert echo.input_schema()["required"] == ["message"]
    said = await pool.call("everything", "echo", {"message": "hi"})
    assert result_text(said) == ("Echo: hi", False)
    summed = await pool.call("everything", "get-sum", {"a": 2, "b": 40})
    assert "42" in result_text(summed)[0]
    parts, _ = result_parts(await pool.call("everything", "get-tiny-image", {}), "tiny")
    (image,) = [part for part in parts if isinstance(part, McpImage)]
    assert image.name == "tiny-1.png"
    assert sniff_image(image.data) == "image/png"
    links, _ = result_text(await pool.call("everything", "get-resource-links", {"count": 2}))
    assert links.count("[resource link] ") == 2
    reports: list[ToolProgress] = []
    arguments: dict[str, object] = {"duration": 0.2, "steps": 2}
    await pool.call("everything", "trigger-long-running-operation", arguments, reports.append)
    assert reports == [ToolProgress(progress=1, total=2), ToolProgress(progress=2, total=2)]
    refused = echo.decode('{"message": 5}')
    assert isinstance(refused, str)
    assert "$.message: expected string" in refused
    assert isinstance(echo.decode('{"message": "ok"}'), McpArguments)


async def test_the_reference_server_over_stdio(tmp_path: Path) -> None:
    assert NODE is not None
    config = McpServerConfig(command=NODE, args=[str(EVERYTHING), "stdio"])
    with trio.fail_after(60):
        async with pool_with(config, tmp_path) as pool:
            await exercise(pool)
            status = pool.status()[0]
    assert status.transport == "stdio"
    assert status.revision == "2025-11-25"  # it refuses server/discover: the handshake


async def test_the_reference_server_over_streamable_http(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with (
            everything_http() as server,
            pool_with(McpServerConfig(url=server.url), tmp_path) as pool,
        ):
            await exercise(pool)
            status = pool.status()[0]
    assert status.transport == "http"
    assert status.state == "running"
    assert status.revision == "2025-11-25"  # a 400 without a 2026-07-28 error: the handshake


async def test_a_crash_quotes_the_stderr_of_that_run_only(tmp_path: Path) -> None:
    node = NODE
    assert node is not None
    events = Events()
    pool = McpPool(tmp_path, on_event=events, backoff=0.05, log_dir=tmp_path / "logs")

    def everything(transport: str) -> list[ServerDefinition]:
        config = McpServerConfig(command=node, args=[str(EVERYTHING), transport])
        return [ServerDefinition(name="everything", source="user", config=config)]

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.serve)
            # A first definition that cannot start: its complaint is in the server's log.
            pool.configure(everything("bogus"))
            (problem,) = await pool.ensure_started()
            assert "Unknown transport: bogus" in problem
            pool.configure(everything("stdio"))  # the same name: the same log file
            assert await pool.ensure_started() == []
            pid = pool.status()[0].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            while not any("crashed" in message for _, message in events.seen):
                await events.changed.wait()
            nursery.cancel_scope.cancel()
    (crashed,) = [message for _, message in events.seen if "crashed" in message]
    assert "it exited with status -9" in crashed
    assert "Starting default (STDIO) server..." in crashed
    assert "bogus" not in crashed
