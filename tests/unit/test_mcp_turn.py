"""MCP tools in a turn, in-process: the real sessions over a real store, the scripted model
over real HTTP calling `mcp__…` tools, a real stdio MCP server (tests/mcp/tiny_server.py).
The permission gate (asks by default, a rule allows a server), a bad argument that never
reaches the server, what results carry, a turn's cancel reaching the server, the approval of
a workspace's server, and a request unchanged when no server is defined."""

import json
import sys
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.inprocess import running_sessions
from tests.unit.test_mcp_pool import TINY, received
from tests.unit.test_skills_turn import JSON, Watcher, call, tool_names, tool_results, turn
from tether.daemon.config.settings import Config, PermissionsConfig
from tether.daemon.context.prompt import system_prompt
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.config import McpServerConfig, merge, read_workspace_servers
from tether.daemon.mcp.pool import McpPool
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.events import ApprovalRequested, ItemCompleted, ItemStarted, TurnCompleted
from tether.protocol.items import Notice, ToolCall
from tether.testing import ModelServer


class Places:
    def __init__(self, tmp_path: Path) -> None:
        self.workspace = tmp_path / "project"
        self.workspace.mkdir()
        self.log = tmp_path / "received.jsonl"
        self.approvals = tmp_path / "state" / "mcp-approvals.json"
        self.store = Store(tmp_path / "tether.sqlite3")

    def server(self, **settings: object) -> McpServerConfig:
        args = [str(TINY), "--log", str(self.log)]
        return McpServerConfig(command=sys.executable, args=args, **settings)  # pyright: ignore[reportArgumentType]

    def calls(self) -> list[JSON]:
        if not self.log.exists():
            return []
        return [m for m in received(self.log) if m.get("method") == "tools/call"]


@pytest.fixture
def places(tmp_path: Path) -> Iterator[Places]:
    found = Places(tmp_path)
    found.store.open()
    yield found
    found.store.close()


@asynccontextmanager
async def daemon_parts(
    places: Places,
    server: ModelServer,
    servers: dict[str, McpServerConfig] | None = None,
    allow: list[str] | None = None,
    pool: bool = True,
) -> AsyncGenerator[Sessions]:
    config = Config(mcp_servers=servers or {}, permissions=PermissionsConfig(allow=allow or []))
    client = OpenAIChatClient(base_url=server.base_url, model="scripted")
    mcp = McpPool(places.workspace, approvals=ServerApprovals(places.approvals))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(mcp.serve)
            async with running_sessions(
                places.store,
                places.workspace,
                server,
                models=FixedModel(client, config),
                mcp=mcp if pool else None,
            ) as sessions:
                yield sessions
            nursery.cancel_scope.cancel()
    finally:
        await client.aclose()


THREE_ANSWERS = {"steps": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}


def define_repo_server(places: Places, definition: dict[str, object]) -> None:
    """The workspace's `.mcp.json`, defining the server `repo`."""
    (places.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo": definition}}))


async def watched_session(sessions: Sessions) -> tuple[Session, Watcher]:
    """A new session with a watcher attached as its controller."""
    session = await sessions.create()
    watcher = Watcher()
    session.attach(watcher, "controller", None)
    return session, watcher


def request_tool(request: JSON, name: str) -> JSON:
    return next(t for t in request["tools"] if t["function"]["name"] == name)


async def test_the_model_calls_an_mcp_tool_a_rule_allows(places: Places) -> None:
    script = {
        "steps": [
            call("mcp__tiny__echo", text="hello"),
            call("mcp__tiny__look"),
            call("mcp__tiny__fail"),
            {"text": "done"},
        ]
    }
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(
            places, server, {"tiny": places.server()}, allow=["mcp__tiny__*"]
        ) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
            listed = sessions.current_tools().names
        first, *_, last = server.requests
    assert "mcp__tiny__echo" in tool_names(first)
    assert "mcp__tiny__hang" in listed
    echo = request_tool(first, "mcp__tiny__echo")["function"]
    assert echo["description"] == "Say the text back."
    assert echo["parameters"]["required"] == ["text"]
    said, looked, failed = tool_results(last)
    assert said == "echo: hello"
    assert looked.splitlines() == [
        "here",
        "[image (image/png, 8 bytes) returned by the tool: not shown, look-1.png: a damaged "
        "png (no size)]",
        "[resource link] file:///tmp/a.txt · name: a.txt",
    ]
    assert failed == "it broke"


async def test_an_mcp_tool_asks_by_default(places: Places) -> None:
    script = {"steps": [call("mcp__tiny__add", a=2, b=3), {"text": "five"}]}
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(places, server, {"tiny": places.server()}) as sessions:
            session = await sessions.create()  # mode `edits`, the default
            watcher = Watcher()
            session.attach(watcher, "controller", None)
            sessions.start_turn(session, TurnRequest(text="add"))
            asked = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
            assert isinstance(asked, ApprovalRequested)
            assert places.calls() == []  # nothing reached the server before the answer
            broker = await sessions.broker(session.id)
            broker.respond(asked.approval.id, decision="allow", scope="once", by="cli")
            await sessions.wait_idle(session.id)
    assert asked.approval.tool == "mcp__tiny__add"
    assert asked.approval.reason == "a call to MCP server tiny asks first"
    assert asked.approval.always_rule == "mcp__tiny__add"
    assert tool_results(server.requests[-1]) == ["5"]


async def test_arguments_that_fail_the_schema_never_reach_the_server(places: Places) -> None:
    script = {
        "steps": [
            call("mcp__tiny__echo", text=5, extra=True),
            call("mcp__tiny__echo", text="x" * 60),
            {"tool_calls": [{"name": "mcp__tiny__echo", "arguments_raw": "{nope"}]},
            {"text": "gave up"},
        ]
    }
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(
            places, server, {"tiny": places.server()}, allow=["mcp__tiny__*"]
        ) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
    typed, long, broken = tool_results(server.requests[-1])
    assert typed.startswith("Invalid arguments for mcp__tiny__echo: $.text: expected string")
    assert "unknown property 'extra'" in typed
    assert "The server was not called" in typed
    assert "$.text: takes at most 50 characters, has 60" in long
    assert "are not valid JSON" in broken
    assert places.calls() == []


async def test_cancelling_the_turn_cancels_the_call_at_the_server(places: Places) -> None:
    script = {"steps": [call("mcp__tiny__hang"), {"text": "never"}]}
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(
            places, server, {"tiny": places.server()}, allow=["mcp__tiny__*"]
        ) as sessions:
            session = await sessions.create()
            watcher = Watcher()
            session.attach(watcher, "controller", None)
            sessions.start_turn(session, TurnRequest(text="hang"))
            await watcher.wait_for(
                lambda e: isinstance(e, ItemStarted) and isinstance(e.item, ToolCall)
            )
            sessions.cancel_turn(session, None)
            done = await watcher.wait_for(lambda e: isinstance(e, TurnCompleted))
            pool = sessions.mcp
            assert pool is not None
            # The server reads its stdin in order: once this is answered, it has read the
            # notice sent before it.
            await pool.call("tiny", "echo", {"text": "sync"})
    assert isinstance(done, TurnCompleted)
    assert done.status == "cancelled"
    cancelled = [m for m in received(places.log) if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["reason"] for c in cancelled] == ["cancelled by the user"]  # pyright: ignore[reportIndexIssue]


async def test_a_workspace_server_runs_only_once_approved(places: Places) -> None:
    definition: dict[str, object] = {
        "command": sys.executable,
        "args": [str(TINY), "--log", str(places.log)],
    }
    define_repo_server(places, definition)
    with trio.fail_after(30), ModelServer(THREE_ANSWERS) as server:
        async with daemon_parts(places, server) as sessions:
            session, watcher = await watched_session(sessions)
            await turn(sessions, session)
            assert not places.log.exists()  # never started
            pool = sessions.mcp
            assert pool is not None
            assert [s.state for s in pool.status()] == ["needs_approval"]
            await pool.approve("repo", by="cli")
            await turn(sessions, session)
            # A changed definition asks again.
            definition["env"] = {"EXTRA": "1"}
            define_repo_server(places, definition)
            await turn(sessions, session)
            states = [s.state for s in pool.status()]
        first, second, third = server.requests
    notices = [
        e.item.message
        for e in watcher.events
        if isinstance(e, ItemCompleted) and isinstance(e.item, Notice)
    ]
    assert "starts only once you approve it (`tether mcp approve repo`)" in notices[0]
    assert not any(name.startswith("mcp__") for name in tool_names(first))
    assert "mcp__repo__echo" in tool_names(second)
    assert not any(name.startswith("mcp__") for name in tool_names(third))
    assert states == ["needs_approval"]
    assert json.loads(places.approvals.read_text())["servers"]["repo"]["by"] == "cli"


def wrapper_script(marker: Path, log: Path) -> str:
    """A workspace's `server.py`: writes `marker`, then serves as the tiny server."""
    return (
        "import pathlib, runpy, sys\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        f"sys.argv = [{str(TINY)!r}, '--log', {str(log)!r}]\n"
        f"runpy.run_path({str(TINY)!r}, run_name='__main__')\n"
    )


async def test_an_approval_does_not_cover_a_changed_script(places: Places) -> None:
    first, changed = places.workspace / "first-ran", places.workspace / "changed-ran"
    script_path = places.workspace / "server.py"
    script_path.write_text(wrapper_script(first, places.log))
    definition: dict[str, object] = {"command": sys.executable, "args": ["server.py"]}
    define_repo_server(places, definition)
    with trio.fail_after(30), ModelServer(THREE_ANSWERS) as server:
        async with daemon_parts(places, server) as sessions:
            session, watcher = await watched_session(sessions)
            pool = sessions.mcp
            assert pool is not None
            await turn(sessions, session)
            await pool.approve("repo", by="cli")
            await turn(sessions, session)
            assert first.exists()
            script_path.write_text(wrapper_script(changed, places.log))
            await turn(sessions, session)
            [status] = pool.status()
        _, second, third = server.requests
    assert "mcp__repo__echo" in tool_names(second)
    assert not any(name.startswith("mcp__") for name in tool_names(third))
    assert not changed.exists()
    assert status.state == "needs_approval"
    assert status.approval_reason == "server.py changed since it was approved"
    notices = [
        e.item.message
        for e in watcher.events
        if isinstance(e, ItemCompleted) and isinstance(e.item, Notice)
    ]
    assert "(`tether mcp approve repo`): server.py changed since it was approved" in notices[-1]


async def test_a_script_changed_before_a_restart_is_not_run(places: Places) -> None:
    """The files are read again right before each start: a server approved, then changed
    behind the pool's back (no turn read the definitions again), never runs the change."""
    changed = places.workspace / "changed-ran"
    script_path = places.workspace / "server.py"
    script_path.write_text(wrapper_script(places.workspace / "first-ran", places.log))
    definition: dict[str, object] = {"command": sys.executable, "args": ["server.py"]}
    define_repo_server(places, definition)
    pool = McpPool(places.workspace, approvals=ServerApprovals(places.approvals))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.serve)
            found = await trio.to_thread.run_sync(read_workspace_servers, places.workspace)
            pool.configure(merge({}, found)[0])
            await pool.approve("repo", by="cli")
            script_path.write_text(wrapper_script(changed, places.log))
            problems = await pool.ensure_started()
            [status] = pool.status()
            nursery.cancel_scope.cancel()
    assert problems == []
    assert status.state == "needs_approval"
    assert status.approval_reason == "server.py changed since it was approved"
    assert not changed.exists()
    recorded = json.loads(places.approvals.read_text())["servers"]["repo"]["files"]
    assert list(recorded) == ["server.py"]


async def test_a_workspace_file_cannot_change_a_user_server(places: Places) -> None:
    other = {"command": "/bin/false"}
    (places.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"tiny": other}}))
    script = {"steps": [call("mcp__tiny__echo", text="mine"), {"text": "ok"}]}
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(
            places, server, {"tiny": places.server()}, allow=["mcp__tiny__*"]
        ) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
    assert tool_results(server.requests[-1]) == ["echo: mine"]


async def test_without_servers_the_request_is_the_one_sent_before_mcp(places: Places) -> None:
    sent: list[JSON] = []
    for pool in (False, True):
        with trio.fail_after(30), ModelServer({"steps": [{"text": "hi"}]}) as server:
            async with daemon_parts(places, server, pool=pool) as sessions:
                session = await sessions.create()
                await turn(sessions, session)
            sent.append(server.requests[0])
    without, with_pool = sent
    assert with_pool["messages"][0] == without["messages"][0]
    assert with_pool["tools"] == without["tools"]
    assert without["messages"][0]["content"] == system_prompt(places.workspace)
