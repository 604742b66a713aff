"""tether's MCP client against a server written with the official Python SDK
(tests/mcp/sdk_server.py, its own process), over stdio and over streamable HTTP on
127.0.0.1. The SDK serves 2026-07-28 and the older handshake alike, so these show tether
choosing 2026-07-28 on both transports: the tools with their schemas, a call, a structured
and an image result as the model sees them, a bad argument refused before the server is
called, a call cancelled at the server, the revision each transport settled."""

import subprocess
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from tests.support import wait_until
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.content import McpImage, result_parts, result_text
from tether.daemon.mcp.pool import McpPool
from tether.daemon.tools.mcp import McpArguments, McpServerTool, mcp_tools

SDK_SERVER = Path(__file__).resolve().parents[1] / "mcp" / "sdk_server.py"


@asynccontextmanager
async def pool_with(config: McpServerConfig, tmp_path: Path) -> AsyncGenerator[McpPool]:
    pool = McpPool(tmp_path, log_dir=tmp_path / "logs")
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        pool.configure([ServerDefinition(name="sdk", source="user", config=config)])
        assert await pool.ensure_started() == []
        yield pool
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def http_server(log: Path) -> AsyncGenerator[str]:
    """The SDK server's streamable HTTP transport; it prints the port it listens on."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SDK_SERVER), "http", "--log", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        said = b""
        while b"\n" not in said:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"the server ended: {said!r}"
            said += chunk
        port = int(said.split()[1])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def line_in(path: Path, line: str) -> None:
    """Until another process has written `line` to `path` (no event reports that)."""

    def written() -> bool:
        return path.exists() and line in path.read_text().splitlines()

    await trio.to_thread.run_sync(wait_until, written, f"{line!r} in {path.name}")


async def exercise(pool: McpPool, log: Path) -> None:
    offered = pool.offered()
    assert [tool.name for _, tool in offered] == ["echo", "add", "look", "wait", "grow"]
    tools = {tool.name: tool for tool in mcp_tools(offered, pool.call)}
    echo = tools["mcp__sdk__echo"]
    assert isinstance(echo, McpServerTool)
    schema = echo.input_schema()
    assert schema["required"] == ["text"]
    assert schema["properties"]["text"]["maxLength"] == 50  # pyright: ignore[reportIndexIssue]
    assert result_text(await pool.call("sdk", "echo", {"text": "hi"})) == ("echo: hi", False)

    summed = await pool.call("sdk", "add", {"a": 2, "b": 40})
    assert summed["structuredContent"] == {"result": 42}
    assert result_text(summed) == ("42", False)
    (image,), _ = result_parts(await pool.call("sdk", "look", {}), "look")
    assert image == McpImage(name="look-1.png", mime_type="image/png", data=b"\x89PNG\r\n\x1a\n")

    refused = echo.decode('{"text": "' + "x" * 51 + '"}')
    assert isinstance(refused, str)
    assert "$.text: " in refused
    assert "at most 50" in refused
    assert isinstance(echo.decode('{"text": "ok"}'), McpArguments)

    async with trio.open_nursery() as nursery:
        no_arguments: dict[str, object] = {}
        nursery.start_soon(pool.call, "sdk", "wait", no_arguments)
        await line_in(log, "started")
        nursery.cancel_scope.cancel()  # as a cancelled turn does
    await line_in(log, "cancelled")
    assert result_text(await pool.call("sdk", "echo", {"text": "after"})) == ("echo: after", False)


async def test_the_sdk_server_over_stdio_speaks_2026_07_28(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    config = McpServerConfig(
        command=sys.executable, args=[str(SDK_SERVER), "stdio", "--log", str(log)]
    )
    with trio.fail_after(60):
        async with pool_with(config, tmp_path) as pool:
            await exercise(pool, log)
            status = pool.status()[0]
    assert status.transport == "stdio"
    assert status.revision == "2026-07-28"


async def test_the_sdk_server_over_streamable_http_speaks_2026_07_28(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with trio.fail_after(60):
        async with http_server(log) as url, pool_with(McpServerConfig(url=url), tmp_path) as pool:
            await exercise(pool, log)
            status = pool.status()[0]
    assert status.transport == "http"
    assert status.revision == "2026-07-28"
