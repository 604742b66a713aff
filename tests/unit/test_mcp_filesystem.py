"""tether's MCP client against the reference filesystem server,
`@modelcontextprotocol/server-filesystem` (`tests/reference_mcp.py`), over stdio: started
with the one folder it may touch (tether offers no roots, so the server keeps to its
arguments), its tools offered with their read-only hints, a file read, a file written, and
a path outside its folder refused by the server as a failed call."""

from pathlib import Path

import pytest
import trio

from tests.reference_mcp import FILESYSTEM, NODE, needs_reference_server
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.content import result_text
from tether.daemon.mcp.pool import McpPool
from tether.daemon.tools.base import ToolContext, ToolFailure
from tether.daemon.tools.mcp import McpArguments, McpServerTool, mcp_tools

pytestmark = needs_reference_server


async def test_the_filesystem_server_reads_writes_and_refuses_outside_its_folder(
    tmp_path: Path,
) -> None:
    assert NODE is not None
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "notes.txt").write_text("first line\nsecond line\n")
    (tmp_path / "secret.txt").write_text("not for the server")
    config = McpServerConfig(command=NODE, args=[str(FILESYSTEM), str(allowed)])
    pool = McpPool(tmp_path, log_dir=tmp_path / "logs")
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.serve)
            pool.configure([ServerDefinition(name="files", source="user", config=config)])
            assert await pool.ensure_started() == []
            status = pool.status()[0]
            tools = {tool.name: tool for tool in mcp_tools(pool.offered(), pool.call)}
            read = tools["mcp__files__read_text_file"]
            write = tools["mcp__files__write_file"]
            assert isinstance(read, McpServerTool)
            assert isinstance(write, McpServerTool)
            ctx = ToolContext(tmp_path)
            params = read.decode(f'{{"path": "{allowed / "notes.txt"}", "head": 1}}')
            assert isinstance(params, McpArguments)
            first = await read.run(params, ctx)
            params = write.decode(f'{{"path": "{allowed / "new.txt"}", "content": "made"}}')
            assert isinstance(params, McpArguments)
            await write.run(params, ctx)
            outside = read.decode(f'{{"path": "{tmp_path / "secret.txt"}"}}')
            assert isinstance(outside, McpArguments)
            with pytest.raises(ToolFailure) as refused:
                await read.run(outside, ctx)
            listed = await pool.call("files", "list_allowed_directories", {})
            nursery.cancel_scope.cancel()
    assert status.state == "running"
    assert status.revision == "2025-11-25"
    assert status.left_out == []
    summaries = {tool.name: tool for tool in status.tools}
    assert summaries["read_text_file"].read_only
    assert not summaries["write_file"].read_only
    assert first.text == "first line"
    assert (allowed / "new.txt").read_text() == "made"
    assert "Access denied - path outside allowed directories" in str(refused.value)
    assert str(allowed) in result_text(listed)[0]
