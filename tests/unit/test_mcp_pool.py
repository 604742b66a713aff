"""The MCP client and pool against a real stdio server (tests/mcp/tiny_server.py, a real
subprocess): the handshake and tool list, a call, a crash mid-call with its report and the
restart, a server that never answers (timeout, cancelled at the server), a turn's cancel
reaching the server, a server that cannot start, stopping the pool stops the process."""

import json
import os
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.errors import McpTimeout, McpUnavailable
from tether.daemon.mcp.pool import McpPool
from tether.daemon.procs.ownership import OwnedGroups

TINY = Path(__file__).resolve().parents[1] / "mcp" / "tiny_server.py"


def tiny(log: Path | None = None, *extra: str, **settings: object) -> McpServerConfig:
    args = [str(TINY), *(["--log", str(log)] if log is not None else []), *extra]
    return McpServerConfig(command=sys.executable, args=args, **settings)  # pyright: ignore[reportArgumentType]


def received(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


class Events:
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


@asynccontextmanager
async def serving(tmp_path: Path, events: Events, **kw: object) -> AsyncGenerator[McpPool]:
    pool = McpPool(tmp_path, on_event=events, backoff=0.05, log_dir=tmp_path / "logs", **kw)  # pyright: ignore[reportArgumentType]
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        yield pool
        nursery.cancel_scope.cancel()


def user(name: str, config: McpServerConfig) -> ServerDefinition:
    return ServerDefinition(name=name, source="user", config=config)


async def test_a_stdio_server_starts_lists_and_answers(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log))])
            assert [s.state for s in pool.status()] == ["idle"]  # lazily: nothing ran yet
            assert not log.exists()
            assert await pool.ensure_started() == []
            names = [tool.name for _, tool in pool.offered()]
            result = await pool.call("tiny", "echo", {"text": "hi"})
            status = pool.status()[0]
    assert names == ["echo", "add", "look", "fail", "crash", "hang"]
    assert result == {"content": [{"type": "text", "text": "echo: hi"}]}
    assert status.state == "running"
    assert status.pid is not None
    methods = [m.get("method") for m in received(log)]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    assert received(log)[0]["params"]["protocolVersion"] == "2025-11-25"  # pyright: ignore[reportIndexIssue]


async def test_a_crash_mid_call_fails_the_call_is_reported_and_restarts(tmp_path: Path) -> None:
    events = Events()
    owned = OwnedGroups(tmp_path / "processes.json")
    with trio.fail_after(20):
        async with serving(tmp_path, events, owned=owned) as pool:
            pool.configure([user("tiny", tiny())])
            await pool.ensure_started()
            first_pid = pool.status()[0].pid
            assert [r.pgid for r in owned.records()] == [first_pid]  # owned like a command
            with pytest.raises(McpUnavailable, match="exited with status 3"):
                await pool.call("tiny", "crash", {})
            crashed = await events.wait_for("mcp/crashed")
            await events.wait_for("mcp/restarted")
            status = pool.status()[0]
            again = await pool.call("tiny", "echo", {"text": "back"})
        assert owned.records() == []  # the pool stopped: the group is gone and forgotten
    assert "MCP server tiny crashed" in crashed
    assert "restarting in 0.05 s" in crashed
    assert status.state == "running"
    assert status.restarts == 1
    assert status.pid != first_pid
    assert again["content"] == [{"type": "text", "text": "echo: back"}]
    assert first_pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)


async def test_a_call_that_is_never_answered_times_out_and_is_cancelled(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log, timeout=0.3))])
            await pool.ensure_started()
            with pytest.raises(McpTimeout, match=r"did not answer tools/call within 0.3 s"):
                await pool.call("tiny", "hang", {})
            still = await pool.call("tiny", "echo", {"text": "after"})
            await trio.sleep(
                0.1
            )  # the notice is written before the call raises; let the log catch up
    cancelled = [m for m in received(log) if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["reason"] for c in cancelled] == ["timed out"]  # pyright: ignore[reportIndexIssue]
    assert still["content"] == [{"type": "text", "text": "echo: after"}]


async def test_cancelling_a_call_cancels_it_at_the_server(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log))])
            await pool.ensure_started()
            with trio.move_on_after(0.3) as scope:
                await pool.call("tiny", "hang", {})
            assert scope.cancelled_caught
            await pool.call("tiny", "echo", {"text": "sync"})
    cancelled = [m for m in received(log) if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["reason"] for c in cancelled] == ["cancelled by the user"]  # pyright: ignore[reportIndexIssue]


async def test_a_server_that_cannot_start_is_reported_and_left_out(tmp_path: Path) -> None:
    events = Events()
    with trio.fail_after(20):
        async with serving(tmp_path, events) as pool:
            pool.configure(
                [
                    user("gone", McpServerConfig(command=str(tmp_path / "no-such-program"))),
                    user("early", tiny(None, "--crash-at-start")),
                    user("tiny", tiny()),
                ]
            )
            problems = await pool.ensure_started()
            offered = {definition.name for definition, _ in pool.offered()}
            with pytest.raises(McpUnavailable, match="MCP server gone is"):
                await pool.call("gone", "echo", {"text": "x"})
    assert offered == {"tiny"}
    gone = next(p for p in problems if "gone" in p)
    assert "exited with status" in gone
    assert "no-such-program" in gone
    assert any(
        "MCP server early failed to start" in message and "exited with status 2" in message
        for _, message in events.seen
    )


async def test_a_changed_definition_replaces_the_server(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny())])
            await pool.ensure_started()
            before = pool.status()[0].pid
            pool.configure([user("tiny", tiny(None, timeout=5.0))])
            assert pool.status()[0].state == "idle"
            await pool.ensure_started()
            after = pool.status()[0].pid
            pool.configure([])
            assert pool.status() == []
    assert before is not None
    assert after is not None
    assert before != after
