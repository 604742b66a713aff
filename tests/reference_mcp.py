"""The reference MCP servers, `@modelcontextprotocol/server-everything` and
`@modelcontextprotocol/server-filesystem` (tests/mcp/package.json; `npm ci --prefix
tests/mcp`), run as real processes for tether's MCP tests: over stdio by path, and the first
over streamable HTTP on a loopback port that a test may stop and start again."""

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

SERVERS = Path(__file__).resolve().parent / "mcp/node_modules/@modelcontextprotocol"
EVERYTHING = SERVERS / "server-everything/dist/index.js"
FILESYSTEM = SERVERS / "server-filesystem/dist/index.js"
NODE = shutil.which("node")

INSTALLED = NODE is not None and EVERYTHING.exists() and FILESYSTEM.exists()
needs_reference_server = pytest.mark.skipif(
    not os.environ.get("CI") and not INSTALLED,
    reason="the reference MCP servers are not installed (npm ci --prefix tests/mcp)",
)
"""Skipped only outside CI when the package is not installed."""


class Events:
    """The events an `McpPool` raised (its `on_event`), in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.changed = trio.Event()

    def __call__(self, kind: str, message: str) -> None:
        self.seen.append((kind, message))
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, kind: str) -> str:
        while True:
            for seen_kind, message in self.seen:
                if seen_kind == kind:
                    return message
            await self.changed.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_command(port: int) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of the reference server's streamable HTTP transport."""
    assert NODE is not None
    return [NODE, str(EVERYTHING), "streamableHttp"], {**os.environ, "PORT": str(port)}


def start_everything_http(port: int) -> subprocess.Popen[bytes]:
    """The same, for a test without trio: started, and listening when this returns."""
    argv, env = http_command(port)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    for line in process.stderr:
        if b"listening on port" in line:
            return process
    raise AssertionError(f"the reference server ended with status {process.wait()}")


def stop_everything_http(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
    if process.stderr is not None:
        process.stderr.close()


class EverythingHttp:
    """The reference server's streamable HTTP transport on one loopback port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._process: trio.Process | None = None

    async def start(self) -> None:
        """Start it and return once it listens."""
        argv, env = http_command(self.port)
        process = self._process = await trio.lowlevel.open_process(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert process.stderr is not None
        said = b""
        while b"listening on port" not in said:
            chunk = await process.stderr.receive_some(4096)
            assert chunk, f"the server ended: {said!r}"
            said += chunk

    async def kill(self) -> None:
        """SIGKILL it, and wait until it is gone: its sessions die with it."""
        if self._process is None:
            return
        process, self._process = self._process, None
        with trio.CancelScope(shield=True):
            process.send_signal(signal.SIGKILL)
            await process.wait()


@asynccontextmanager
async def everything_http() -> AsyncGenerator[EverythingHttp]:
    server = EverythingHttp(free_port())
    try:
        await server.start()
        yield server
    finally:
        await server.kill()
