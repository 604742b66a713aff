"""What tether adds to an MCP tool call over stdio, beyond the server's own time.

The server is tests/mcp/tiny_server.py (its `echo` tool), once speaking the 2025-11-25
handshake and once 2026-07-28 (`--modern`: every request carries its `_meta`). Measured,
`--calls` times each:

  server   a bare client: one JSON-RPC line written to the server's stdin, its answer read
           back (blocking pipes, nothing else): the server's own time and the pipe
  tether   the same call as a turn makes it: the tool's schema check (`decode`), the
           registry's run (the pool, the client, the stdio transport under trio), the
           result turned into the model's text and capped

Target: tether's median minus the server's median <= 5 ms, for each revision.

Usage: python bench/mcp_latency.py [--calls N]
Takes a few seconds.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import trio

from _harness import handle_sigterm, load_line, machine_line, median, ms, percentile, row, verdict
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.pool import McpPool
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.mcp import mcp_tools
from tether.daemon.tools.registry import ToolRegistry

TINY = Path(__file__).resolve().parent.parent / "tests" / "mcp" / "tiny_server.py"
TARGET = 0.005


META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
}


def bare(calls: int, flags: list[str]) -> list[float]:
    process = subprocess.Popen(
        [sys.executable, str(TINY), *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    modern = "--modern" in flags
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdout.readline()  # the banner

    def exchange(ident: int, method: str, params: dict[str, object]) -> None:
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
        json.loads(process.stdout.readline())

    times: list[float] = []
    try:
        if not modern:
            exchange(0, "initialize", {})
        for index in range(calls):
            arguments: dict[str, object] = {"name": "echo", "arguments": {"text": f"call {index}"}}
            if modern:
                arguments["_meta"] = META
            start = time.perf_counter()
            exchange(index + 1, "tools/call", arguments)
            times.append(time.perf_counter() - start)
    finally:
        process.kill()
        process.wait()
    return times


async def through_tether(calls: int, workspace: Path, flags: list[str]) -> list[float]:
    pool = McpPool(workspace)
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        config = McpServerConfig(command=sys.executable, args=[str(TINY), *flags])
        pool.configure([ServerDefinition(name="tiny", source="user", config=config)])
        assert await pool.ensure_started() == []
        registry = ToolRegistry(mcp_tools(pool.offered(), pool.call))
        context = ToolContext(workspace)
        for index in range(calls):
            start = time.perf_counter()
            params = registry.validate("mcp__tiny__echo", json.dumps({"text": f"call {index}"}))
            assert not isinstance(params, str), params
            result = await registry.run("mcp__tiny__echo", params, context)
            times.append(time.perf_counter() - start)
            assert result.status == "completed", result.output
        nursery.cancel_scope.cancel()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="What tether adds to an MCP tool call.")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    handle_sigterm()
    print("MCP tool call over stdio (tiny_server echo)")
    print(f"  {machine_line()}; {load_line()}")
    for revision, flags in (("2025-11-25", []), ("2026-07-28", ["--modern"])):
        server = bare(args.calls, flags)
        tether = trio.run(through_tether, args.calls, Path.cwd(), flags)
        added = median(tether) - median(server)
        print(f"MCP {revision}")
        row("server alone (bare client), median", ms(median(server)))
        row("server alone, p90", ms(percentile(server, 90)))
        row("through tether (check, pool, client, result), median", ms(median(tether)))
        row("through tether, p90", ms(percentile(tether, 90)))
        row(
            "added by tether (median difference)",
            ms(added),
            f"<= {ms(TARGET)}",
            verdict(added, TARGET),
        )


if __name__ == "__main__":
    main()
