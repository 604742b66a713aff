"""MCP servers through the real daemon: the scripted model calls an `mcp__…` tool of a
server in the user's config.toml; `tether mcp` shows the servers, their state and tools; a
workspace's server waits for `tether mcp approve`, which outlives the daemon; with the
reference server, a long tool's progress on the wire and its task-only tool left out (and
said so), and over HTTP a server restarted between two turns answering the second."""

import json
import sys
from pathlib import Path

import pytest

from tests.reference_mcp import (
    EVERYTHING,
    NODE,
    free_port,
    needs_reference_server,
    start_everything_http,
    stop_everything_http,
)
from tests.support import (
    Home,
    attach,
    collect_until_turn_end,
    completed_items,
    create_session,
    run_cli,
    start_daemon,
    start_turn,
    tagged,
    wait_until,
)
from tests.unit.test_mcp_pool import TINY
from tether.clients.core.rpc import CallError, Client
from tether.protocol.errors import ErrorCode
from tether.protocol.items import Notice, ToolCall
from tether.protocol.methods import (
    MCP_STATUS,
    SESSION_CONFIGURE,
    SESSION_DETACH,
    Empty,
    SessionConfigureParams,
    SessionMcpServer,
    SessionRef,
)
from tether.testing import ModelServer


def write_user_config(home: Home) -> None:
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "[permissions]\n"
        'allow = ["mcp__tiny__*"]\n'
        "[mcpServers.tiny]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(TINY))}]\n"
    )


def test_the_model_calls_an_mcp_tool_and_tether_mcp_shows_the_servers(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    write_user_config(home)
    repo = {"command": sys.executable, "args": [str(TINY)]}
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo": repo}}))
    call = {"name": "mcp__tiny__echo", "arguments": {"text": "through the daemon"}}
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "done"}]})
    daemon = start_daemon(home, workspace)
    try:
        ran = run_cli(home, "run", "-w", str(workspace), "go")
        listed = json.loads(run_cli(home, "mcp", "-w", str(workspace), "--json").stdout)
        running = run_cli(home, "mcp", "-w", str(workspace)).stdout.splitlines()[0]
        approved = run_cli(home, "mcp", "approve", "repo", "-w", str(workspace))
        unknown = run_cli(home, "mcp", "approve", "nope", "-w", str(workspace))
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(home, workspace)
    try:
        shown = run_cli(home, "mcp", "-w", str(workspace))
    finally:
        assert daemon.stop() == 0
    assert ran.returncode == 0, ran.stderr
    results = [
        m["content"] for r in model_server.requests for m in r["messages"] if m["role"] == "tool"
    ]
    assert results == ["echo: through the daemon"]
    tiny, waiting = listed["servers"]
    assert (tiny["name"], tiny["state"], tiny["source"]) == ("tiny", "running", "user")
    assert [t["name"] for t in tiny["tools"]][:2] == ["echo", "add"]
    assert tiny["revision"] == "2025-11-25"  # the tiny server takes only the older handshake
    assert running.startswith(f"tiny  running  stdio (MCP 2025-11-25)  {sys.executable} ")
    assert (waiting["name"], waiting["state"]) == ("repo", "needs_approval")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == "approved repo; it starts with the next turn\n"
    assert unknown.returncode != 0
    assert "no MCP server 'nope' in this workspace" in unknown.stderr
    # A new daemon: nothing has started yet (lazily), and the approval was remembered.
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"tiny  idle  stdio  {sys.executable} ")
    assert lines[1].startswith(f"repo  idle  stdio  {sys.executable} ")
    assert lines[1].endswith("(from .mcp.json)")


def test_servers_a_client_gives_a_session_serve_that_session_alone(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    """`session/configure`'s `mcpServers`: refused when wrong, offered to that session's turns
    only (another session's do not see them), left out when the user's config already uses
    the name, and stopped when the client detaches."""
    write_user_config(home)
    tiny = {"command": sys.executable, "args": [str(TINY)]}
    marker = f"given-{workspace.name}"
    mine = SessionMcpServer(name="mine", env={"MARK": marker}, **tiny)  # type: ignore[arg-type]
    shadowed = SessionMcpServer(name="tiny", **tiny)  # type: ignore[arg-type]
    call = {"name": "mcp__mine__echo", "arguments": {"text": "given"}}
    model_server.set_script(
        {"steps": [{"tool_calls": [call]}, {"text": "done"}, {"text": "other"}]}
    )
    daemon = start_daemon(home, workspace)
    try:
        with daemon.client("editor") as client:
            session_id = create_session(client)
            other_id = create_session(client)
            attach(client, session_id)
            attach(client, other_id)
            refused: list[str] = []
            for wrong in (
                [SessionMcpServer(name="two words", command="x")],
                [SessionMcpServer(name="both", command="x", url="http://127.0.0.1:1/")],
                [SessionMcpServer(name="ftp", url="ftp://127.0.0.1/")],
                [mine, mine],
            ):
                with pytest.raises(CallError) as error:
                    configure(client, session_id, wrong)
                assert error.value.code == ErrorCode.INVALID_PARAMS
                refused.append(error.value.message)
            # A connection not attached to the session: not its to give.
            with daemon.client("other") as other, pytest.raises(CallError) as not_attached:
                configure(other, session_id, [mine])
            configure(client, session_id, [mine, shadowed])
            start_turn(client, session_id, "go")
            events = collect_until_turn_end(client, session_id)
            start_turn(client, other_id, "go")
            collect_until_turn_end(client, other_id)
            ran = tagged(marker)
            client.call(SESSION_DETACH, SessionRef(session_id=session_id))
            wait_until(lambda: not tagged(marker), "the session's server stopped on detach")
            status = client.call(MCP_STATUS, Empty())
    finally:
        assert daemon.stop() == 0
    assert len(ran) == 1
    assert not_attached.value.code == ErrorCode.NOT_ATTACHED
    assert refused[0].startswith("mcpServers[0]: invalid MCP server name(s) 'two words'")
    assert "exactly one of `command` or `url`" in refused[1]
    assert "must be http:// or https://" in refused[2]
    assert refused[3] == "mcpServers[1]: 'mine' is given twice"
    (result,) = [i for i in completed_items(events) if isinstance(i, ToolCall)]
    assert (result.status, result.output) == ("completed", "echo: given")
    notices = [i.message for i in completed_items(events) if isinstance(i, Notice)]
    assert any("The MCP server tiny given to this session is left out" in n for n in notices)
    own, other = [[t["function"]["name"] for t in r["tools"]] for r in model_server.requests[1:]]
    assert "mcp__mine__echo" in own
    assert "mcp__mine__echo" not in other
    assert "mcp__tiny__echo" in other
    # Only the daemon's own servers are listed: the session's are not the workspace's.
    assert [s.name for s in status.servers] == ["tiny"]


def configure(client: Client, session_id: str, servers: list[SessionMcpServer]) -> None:
    """Give the session `servers`, its calls allowed without asking."""
    params = SessionConfigureParams(
        session_id=session_id, mcp_servers=servers, permission_mode="auto"
    )
    client.call(SESSION_CONFIGURE, params)


def write_everything_config(home: Home, server: str) -> None:
    """The reference server in the user's config.toml, every call of it allowed."""
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[permissions]\nallow = ["mcp__everything__*"]\n[mcpServers.everything]\n' + server
    )


@needs_reference_server
def test_a_long_tools_progress_reaches_the_client_and_task_only_tools_are_left_out(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    assert NODE is not None
    args = json.dumps([str(EVERYTHING), "stdio"])
    write_everything_config(home, f"command = {json.dumps(NODE)}\nargs = {args}\n")
    name = "mcp__everything__trigger-long-running-operation"
    call = {"name": name, "arguments": {"duration": 0.4, "steps": 2}}
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "done"}]})
    daemon = start_daemon(home, workspace)
    try:
        ran = run_cli(home, "run", "--json", "-w", str(workspace), "go")
        listed = run_cli(home, "mcp", "-w", str(workspace)).stdout
    finally:
        assert daemon.stop() == 0
    assert ran.returncode == 0, ran.stderr
    events = [json.loads(line)["event"] for line in ran.stdout.splitlines()]
    progress = [
        e["progress"] for e in events if e.get("type") == "item_delta" and e.get("progress")
    ]
    assert progress == [
        {"progress": 1.0, "total": 2.0},
        {"progress": 2.0, "total": 2.0},
    ]
    assert (
        "  left out: simulate-research-query: it runs only as a task (execution.taskSupport "
        '"required"), which tether does not support'
    ) in listed.splitlines()


@needs_reference_server
def test_an_http_server_that_restarts_is_reconnected_and_the_next_call_answered(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    port = free_port()
    write_everything_config(home, f'url = "http://127.0.0.1:{port}/mcp"\n')
    call = {"name": "mcp__everything__echo", "arguments": {"message": "hi"}}
    step = {"steps": [{"tool_calls": [call]}, {"text": "done"}]}
    server = start_everything_http(port)
    daemon = start_daemon(home, workspace)
    try:
        model_server.set_script(step)
        first = run_cli(home, "run", "-w", str(workspace), "go")
        stop_everything_http(server)
        server = start_everything_http(port)
        model_server.set_script(step)
        second = run_cli(home, "run", "-w", str(workspace), "again")
        status = json.loads(run_cli(home, "mcp", "-w", str(workspace), "--json").stdout)
    finally:
        assert daemon.stop() == 0
        stop_everything_http(server)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    results = [
        m["content"] for r in model_server.requests for m in r["messages"] if m["role"] == "tool"
    ]
    assert results[-1] == "Echo: hi"
    assert "Bad Request" not in "".join(results)
    (everything,) = status["servers"]
    assert (everything["state"], everything["restarts"]) == ("running", 1)
