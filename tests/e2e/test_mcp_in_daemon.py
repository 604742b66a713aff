"""MCP servers through the real daemon: the scripted model calls an `mcp__…` tool of a
server in the user's config.toml; `tether mcp` shows the servers, their state and tools; a
workspace's server waits for `tether mcp approve`, which outlives the daemon."""

import json
import sys
from pathlib import Path

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
