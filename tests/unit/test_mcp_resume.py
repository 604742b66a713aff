"""An answer stream that breaks mid-call, over streamable HTTP, against a server written with
the official TypeScript SDK (tests/mcp/resumable_server.mjs, its own process on 127.0.0.1)
that breaks a call's answer stream right after its progress event: the connection
destroyed, the response ended, or the SDK's own `closeSSEStream` (a server asking its client
to poll). With the SDK's event store every event has an id, so tether resumes the stream
with a GET carrying `Last-Event-ID` and gets the answer there, once; without one the call
fails (at once, when the server ended the stream) and is never sent again. With the
reference server (whose event store gives ids too) killed mid-answer, resuming gives way to
the call's own timeout."""

import subprocess
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.reference_mcp import NODE, Events, everything_http, needs_reference_server
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.content import result_text
from tether.daemon.mcp.errors import (
    McpNotDelivered,
    McpProtocolError,
    McpTimeout,
    McpUnavailable,
)
from tether.daemon.mcp.pool import McpPool
from tether.protocol.events import ToolProgress

pytestmark = needs_reference_server

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "resumable_server.mjs"


@asynccontextmanager
async def resumable_server(log: Path, *extra: str) -> AsyncGenerator[str]:
    """The server's URL once it listens; it prints the port."""
    assert NODE is not None
    process = await trio.lowlevel.open_process(
        [NODE, str(SERVER), str(log), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=SERVER.parent,
    )
    try:
        assert process.stdout is not None
        said = b""
        while b"\n" not in said:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"the server ended: {said!r}"
            said += chunk
        yield f"http://127.0.0.1:{int(said.split()[1])}/mcp"
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


@asynccontextmanager
async def pool_on(
    url: str, tmp_path: Path, events: Events, *, call_seconds: float = 60.0
) -> AsyncGenerator[McpPool]:
    pool = McpPool(tmp_path, on_event=events, backoff=0.05, max_backoff=0.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        config = McpServerConfig(url=url, timeout=call_seconds)
        pool.configure([ServerDefinition(name="resumable", source="user", config=config)])
        assert await pool.ensure_started() == []
        yield pool
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("tool", ["cut", "end", "poll"])
async def test_a_stream_broken_after_an_event_id_is_resumed_and_answers_once(
    tmp_path: Path, tool: str
) -> None:
    log, events = tmp_path / "server.log", Events()
    progress: list[ToolProgress] = []
    with trio.fail_after(60):
        async with resumable_server(log) as url, pool_on(url, tmp_path, events) as pool:
            result = await pool.call("resumable", tool, {"text": "one"}, progress.append)
            status = pool.status()[0]
    assert result_text(result) == (f"{tool}: one", False)
    assert [report.progress for report in progress] == [1.0]
    lines = log.read_text().splitlines()
    assert lines.count(f"ran {tool}") == 1
    (resumed,) = [line for line in lines if line.startswith("GET ")]
    assert resumed.removeprefix("GET last-event-id=")  # the id of the progress event
    assert events.seen == []  # the connection was never given up
    assert status.state == "running"
    assert status.revision == "2025-11-25"


async def test_a_stream_cut_before_any_event_id_fails_the_call_once(tmp_path: Path) -> None:
    log, events = tmp_path / "server.log", Events()
    progress: list[ToolProgress] = []
    with trio.fail_after(60):
        async with (
            resumable_server(log, "--no-store") as url,
            pool_on(url, tmp_path, events) as pool,
        ):
            with pytest.raises(McpUnavailable) as failed:
                await pool.call("resumable", "cut", {"text": "one"}, progress.append)
            await events.wait_for("mcp/recovered")
    assert not isinstance(failed.value, McpNotDelivered)  # it may have acted: not sent again
    assert "the connection was lost" in str(failed.value)
    assert [report.progress for report in progress] == [1.0]
    lines = log.read_text().splitlines()
    assert lines.count("ran cut") == 1
    assert not [line for line in lines if line.startswith("GET ")]


async def test_a_stream_ended_before_the_answer_without_an_event_id_fails_the_call_at_once(
    tmp_path: Path,
) -> None:
    log, events = tmp_path / "server.log", Events()
    with trio.fail_after(60):
        async with (
            resumable_server(log, "--no-store") as url,
            pool_on(url, tmp_path, events) as pool,
        ):
            with pytest.raises(McpProtocolError, match="ended its answer stream before the"):
                await pool.call("resumable", "end", {"text": "one"})
            # The connection itself is sound: the next call is answered on it.
            with pytest.raises(McpProtocolError):
                await pool.call("resumable", "end", {"text": "two"})
            status = pool.status()[0]
    lines = log.read_text().splitlines()
    assert lines.count("ran end") == 2
    assert not [line for line in lines if line.startswith("GET ")]
    assert events.seen == []
    assert status.state == "running"


async def test_resuming_a_stream_gives_way_to_the_calls_own_timeout(tmp_path: Path) -> None:
    events = Events()
    progressed = trio.Event()
    failure: list[McpTimeout] = []

    async def long_call(pool: McpPool) -> None:
        arguments: dict[str, object] = {"duration": 60, "steps": 600}
        with pytest.raises(McpTimeout) as failed:
            await pool.call(
                "resumable",
                "trigger-long-running-operation",
                arguments,
                lambda _report: progressed.set(),
            )
        failure.append(failed.value)

    with trio.fail_after(60):
        async with (
            everything_http() as server,
            pool_on(server.url, tmp_path, events, call_seconds=2.0) as pool,
            trio.open_nursery() as calls,
        ):
            calls.start_soon(long_call, pool)
            await progressed.wait()  # an event with an id came: the stream can be resumed
            await server.kill()  # so each attempt to resume meets a closed port
    (timed_out,) = failure
    assert "did not answer tools/call within 2 s" in str(timed_out)
