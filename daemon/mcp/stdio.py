"""The stdio transport: one JSON-RPC message per line on the server's stdin and stdout.

A line that is not JSON is logged and skipped (a server printing a banner on stdout must not
kill the session); a line longer than `MAX_LINE` ends the connection. The process belongs to
the daemon like a command's tree (`tether.daemon.procs.server`).
"""

from pathlib import Path
from typing import Literal

import msgspec
import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.mcp.client import Deliver, Route
from tether.daemon.mcp.errors import McpProtocolError, McpUnavailable
from tether.daemon.procs.spawn import PipedChild

log = get_logger(__name__)

MAX_LINE = 64 * 1024 * 1024


class StdioTransport:
    kind: Literal["stdio", "http"] = "stdio"

    def __init__(
        self,
        process: PipedChild,
        *,
        name: str,
        log_path: Path | None = None,
        log_start: int = 0,
    ) -> None:
        """`log_path`: where its stderr goes, appended to the earlier runs' from `log_start`
        (its size before this run)."""
        self.process = process
        self.name = name
        self.log_path = log_path
        self.log_start = log_start
        self._write_lock = trio.Lock()

    async def exit_reason(self) -> str:
        """How the process ended (waiting up to 1 s for it), with the end of what it wrote
        to stderr in this run."""
        with trio.move_on_after(1.0):
            await self.process.wait()
        code = self.process.returncode
        if code is None:
            return "it closed its stdout"
        said = await trio.to_thread.run_sync(self._stderr_tail)
        return f"it exited with status {code}" + (f" ({said})" if said else "")

    def _stderr_tail(self) -> str:
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as handle:
                size = handle.seek(0, 2)
                # A log that shrank was started afresh at this run's start.
                start = self.log_start if self.log_start <= size else 0
                handle.seek(max(start, size - 300))
                tail = handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return " ".join(tail.splitlines()[-3:])

    def negotiated(self, version: str) -> None:
        return None

    async def send(self, message: bytes, deliver: Deliver, route: Route | None = None) -> None:
        async with self._write_lock:
            try:
                await self.process.stdin.send_all(message + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise McpUnavailable(f"MCP server {self.name}: {await self.exit_reason()}") from exc

    async def serve(self, deliver: Deliver) -> None:
        """Read lines until the server closes stdout."""
        buffer = bytearray()
        decoder = msgspec.json.Decoder()
        while True:
            try:
                chunk = await self.process.stdout.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise McpUnavailable(f"reading its stdout failed: {exc}") from exc
            if not chunk:
                raise McpUnavailable(await self.exit_reason())
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end]).strip()
                del buffer[: end + 1]
                if not line:
                    continue
                try:
                    message: object = decoder.decode(line)
                except msgspec.DecodeError:
                    log.warning(
                        "an MCP server printed a non-JSON line", server=self.name, line=line[:200]
                    )
                    continue
                deliver(message)
            if len(buffer) > MAX_LINE:
                raise McpProtocolError(f"a line of more than {MAX_LINE} bytes")
