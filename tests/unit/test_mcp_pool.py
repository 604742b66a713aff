"""The MCP client and pool against a real stdio server (tests/mcp/tiny_server.py, a real
subprocess): the handshake and tool list, a call, a crash mid-call with its report and the
restart, a server that never answers (timeout, cancelled at the server), a turn's cancel
reaching the server, a server that cannot start, stopping the pool stops the process; and
how the revision is settled: 2026-07-28 with a server that speaks it, the 2025-11-25
handshake after a refused or unanswered `server/discover`, remembered across a restart."""

import json
import os
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.reference_mcp import Events
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.errors import McpProtocolError, McpTimeout, McpUnavailable
from tether.daemon.mcp.pool import McpPool
from tether.daemon.procs.ownership import OwnedGroups

TINY = Path(__file__).resolve().parents[1] / "mcp" / "tiny_server.py"


def tiny(log: Path | None = None, *extra: str, **settings: object) -> McpServerConfig:
    args = [str(TINY), *(["--log", str(log)] if log is not None else []), *extra]
    return McpServerConfig(command=sys.executable, args=args, **settings)  # pyright: ignore[reportArgumentType]


def received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


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
    # An older server refuses the probe (-32601), so the handshake follows.
    assert methods == [
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
    ]
    assert received(log)[1]["params"]["protocolVersion"] == "2025-11-25"  # pyright: ignore[reportIndexIssue]
    assert all("_meta" not in m.get("params", {}) for m in received(log)[1:])  # pyright: ignore[reportOperatorIssue]
    assert status.revision == "2025-11-25"


async def test_a_crash_mid_call_fails_the_call_is_reported_and_restarts(tmp_path: Path) -> None:
    events = Events()
    owned = OwnedGroups(tmp_path / "processes.json")
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, events, owned=owned) as pool:
            pool.configure([user("tiny", tiny(log))])
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
    # The restarted process is the same definition: it goes straight to the handshake.
    methods = [m.get("method") for m in received(log)]
    assert methods.count("server/discover") == 1
    assert methods.count("initialize") == 2


@pytest.mark.parametrize("revision", [[], ["--modern"]], ids=["2025-11-25", "2026-07-28"])
async def test_a_call_that_is_never_answered_times_out_and_is_cancelled(
    tmp_path: Path, revision: list[str]
) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log, *revision, timeout=0.3))])
            await pool.ensure_started()
            with pytest.raises(McpTimeout, match=r"did not answer tools/call within 0.3 s"):
                await pool.call("tiny", "hang", {})
            # The notice was sent before the call raised, so ahead of this call: the server,
            # logging each message as it reads it, has logged it by the time this is answered.
            still = await pool.call("tiny", "echo", {"text": "after"})
    [hang] = [m["id"] for m in received(log) if m.get("params", {}).get("name") == "hang"]
    cancelled = [m for m in received(log) if m.get("method") == "notifications/cancelled"]
    assert [c["params"] for c in cancelled if c["params"]["requestId"] == hang] == [
        {"requestId": hang, "reason": "timed out"}
    ]
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


async def test_a_server_speaking_2026_07_28_gets_no_handshake(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log, "--modern"))])
            assert await pool.ensure_started() == []
            result = await pool.call("tiny", "echo", {"text": "now"})
            status = pool.status()[0]
    assert result["content"] == [{"type": "text", "text": "echo: now"}]
    assert status.revision == "2026-07-28"
    # Requests only, but for the subscription (whose cancel may follow as the pool stops).
    messages = [m for m in received(log) if "id" in m and m["method"] != "subscriptions/listen"]
    assert [m.get("method") for m in messages] == ["server/discover", "tools/list", "tools/call"]
    for message in messages:  # the revision, capabilities and tether's name on every request
        meta: dict[str, Any] = message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "tether"


async def test_an_unanswered_probe_falls_back_to_the_handshake(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events(), probe_timeout=0.3) as pool:
            pool.configure([user("tiny", tiny(log, "--silent-probe"))])
            assert await pool.ensure_started() == []
            status = pool.status()[0]
    assert status.state == "running"
    assert status.revision == "2025-11-25"
    methods = [m.get("method") for m in received(log)]
    assert methods[:3] == ["server/discover", "notifications/cancelled", "initialize"]


async def test_a_probe_answered_late_still_finds_the_2026_07_28_server(tmp_path: Path) -> None:
    """The probe's wait passed while the server was starting; the handshake it then refuses
    shows it is answering, so it is asked again and 2026-07-28 is spoken."""
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events(), probe_timeout=0.2) as pool:
            pool.configure([user("tiny", tiny(log, "--modern", "--slow-discover"))])
            assert await pool.ensure_started() == []
            status = pool.status()[0]
    assert status.revision == "2026-07-28"
    methods = [m.get("method") for m in received(log)]
    assert methods[:5] == [
        "server/discover",
        "notifications/cancelled",
        "initialize",
        "server/discover",
        "tools/list",
    ]


async def test_a_server_naming_only_revisions_tether_lacks_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(None, "--modern", "--supported", "2099-01-01"))])
            problems = await pool.ensure_started()
            status = pool.status()[0]
    assert status.state != "running"
    assert "the server speaks MCP 2099-01-01, which tether does not" in status.last_error
    assert len(problems) == 1
    assert "2099-01-01" in problems[0]


async def test_a_modern_server_that_also_takes_the_old_revision_is_asked_for_it(
    tmp_path: Path,
) -> None:
    """A -32022 naming 2025-11-25 only: tether speaks that one, by the handshake."""
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            config = tiny(log, "--modern", "--supported", "2025-11-25")
            pool.configure([user("tiny", config)])
            await pool.ensure_started()
    methods = [m.get("method") for m in received(log)]
    assert methods[:2] == ["server/discover", "initialize"]


async def test_a_result_asking_for_input_fails_the_call_saying_why(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(None, "--modern"))])
            await pool.ensure_started()
            with pytest.raises(
                McpProtocolError, match=r"asking for input .* tether does not offer"
            ):
                await pool.call("tiny", "ask", {})
            after = await pool.call("tiny", "echo", {"text": "still"})
    assert after["content"] == [{"type": "text", "text": "echo: still"}]


async def test_tools_are_listed_again_once_their_freshness_has_passed(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("stale", tiny(log, "--modern", "--ttl", "0"))])
            await pool.ensure_started()
            await pool.ensure_started()  # the next turn: ttlMs 0 is stale at once
            assert [m.get("method") for m in received(log)].count("tools/list") == 2
            fresh = tmp_path / "fresh.jsonl"
            pool.configure([user("fresh", tiny(fresh, "--modern", "--ttl", "3600000"))])
            await pool.ensure_started()
            await pool.ensure_started()
    assert [m.get("method") for m in received(fresh)].count("tools/list") == 1


async def test_a_2026_07_28_server_announces_changed_tools_on_its_subscription(
    tmp_path: Path,
) -> None:
    log = tmp_path / "received.jsonl"
    with trio.fail_after(20):
        async with serving(tmp_path, Events()) as pool:
            pool.configure([user("tiny", tiny(log, "--modern", "--ttl", "3600000"))])
            await pool.ensure_started()
            assert "grown" not in [tool.name for _, tool in pool.offered()]
            await pool.call("tiny", "grow", {})
            await pool.ensure_started()  # the next turn lists them again
            names = [tool.name for _, tool in pool.offered()]
    assert "grown" in names
    listen = [m for m in received(log) if m.get("method") == "subscriptions/listen"]
    assert [m["params"]["notifications"] for m in listen] == [{"toolsListChanged": True}]
