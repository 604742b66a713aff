"""`tether mcp`: the workspace's MCP servers (state, transport and the MCP revision spoken,
tools, last error); `tether mcp approve NAME` lets a workspace's server run."""

import argparse
import sys

from tether.clients.cli.commands.output import print_json, print_report
from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import (
    MCP_APPROVE,
    MCP_STATUS,
    McpApproveParams,
    McpServerInfo,
    McpStatusResult,
)


def describe_server(server: McpServerInfo) -> list[str]:
    """A server as lines of text, every character a terminal would hide escaped."""
    where = " ".join(server.command) if server.command else server.url
    revision = f" (MCP {visible(server.revision)})" if server.revision else ""
    head = f"{server.name}  {server.state}  {server.transport}{revision}  {visible(where)}"
    if server.source == "workspace":
        head += f"  (from {visible(server.origin)})"
    lines = [head]
    if server.state == "needs_approval":
        why = f" ({visible(server.approval_reason)})" if server.approval_reason else ""
        lines.append(f"  runs once approved{why}: tether mcp approve {server.name}")
    if server.last_error:
        lines.append(f"  last error: {visible(server.last_error)}")
    if server.tools:
        names = ", ".join(
            visible(t.name) + (" (read-only)" if t.read_only else "") for t in server.tools
        )
        lines.append(f"  tools: {names}")
    lines += [
        f"  left out: {visible(tool.name)}: {visible(tool.reason)}" for tool in server.left_out
    ]
    return lines


def describe_status(status: McpStatusResult) -> str:
    lines: list[str] = []
    for server in status.servers:
        lines += describe_server(server)
    if not status.servers:
        lines.append(
            "no MCP servers ([mcpServers.NAME] in config.toml, or the workspace's .mcp.json)"
        )
    lines += [f"problem: {visible(problem)}" for problem in status.problems]
    return "\n".join(lines)


def cmd_mcp(args: argparse.Namespace) -> int:
    if args.action == "approve" and not args.name:
        print("tether mcp approve: name the server to approve", file=sys.stderr)
        return EXIT_USAGE
    with connect(args) as client:
        if args.action == "approve":
            approved = client.call(MCP_APPROVE, McpApproveParams(name=args.name)).server
            if args.json:
                print_json(approved)
            else:
                print(f"approved {approved.name}; it starts with the next turn")
            return EXIT_OK
        status = client.call(MCP_STATUS)
    return print_report(status, as_json=args.json, describe=describe_status)
