"""MCP servers through the real daemon: the scripted model calls an `mcp__…` tool of a
server in the user's config.toml; `tether mcp` shows the servers, their state and tools; a
workspace's server waits for `tether mcp approve`, which outlives the daemon; with the
reference server, a long tool's progress on the wire and its task-only tool left out (and
said so), and over HTTP a server restarted between two turns answering the second."""

import json
import sys
from pathlib import Path

from tests.reference_mcp import (
    EVERYTHING,
    NODE,
    free_port,
    needs_reference_server,
    start_everything_http,
    stop_everything_http,
)
from tests.support import Home, run_cli, start_daemon
from tests.unit.test_mcp_pool import TINY
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
