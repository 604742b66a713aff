"""An MCP server written with the official Python SDK (`mcp`), for tether's client tests.

    python sdk_server.py stdio [--log PATH]
    python sdk_server.py http [--log PATH]     prints `port N` once listening on 127.0.0.1

The SDK serves both eras: the 2026-07-28 revision (per-request `_meta`, `server/discover`)
and the 2025-11-25 `initialize` handshake, so which one a client ends up speaking is the
client's choice. Tools: `echo` {text ≤ 50 chars}, `add` {a, b: integers} (structured
result), `look` (read-only: an image), `wait` (runs until cancelled), `grow` (adds a tool
`grown` and announces it on the `subscriptions/listen` streams open). With `--log PATH`
the `wait` tool appends `started` and then `cancelled` to PATH, so a test can tell that a
cancellation reached the server.

This runs as its own process on anyio; tether's daemon never imports the SDK.
"""

import socket
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

LOG = sys.argv[sys.argv.index("--log") + 1] if "--log" in sys.argv else ""

server = MCPServer("sdk-test", version="1.0")


def note(line: str) -> None:
    if LOG:
        with open(LOG, "a") as handle:
            handle.write(line + "\n")


@server.tool(description="Say the text back.")
def echo(text: Annotated[str, Field(max_length=50)]) -> str:
    return f"echo: {text}"


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="A picture.", annotations=ToolAnnotations(read_only_hint=True))
def look() -> Image:
    return Image(data=b"\x89PNG\r\n\x1a\n", format="png")


@server.tool(description="Runs until cancelled.")
async def wait() -> str:
    note("started")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        note("cancelled")
        raise
    return "never"


@server.tool(description="Adds a tool `grown`, announced to those listening.")
async def grow(ctx: Context) -> str:
    server.add_tool(lambda: "new", name="grown", description="New.")
    await ctx.notify_tools_changed()
    return "grown"


async def serve_http() -> None:
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    print(f"port {listener.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[listener])


def main() -> None:
    if sys.argv[1:2] == ["http"]:
        anyio.run(serve_http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
