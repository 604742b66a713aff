"""`tether acp`: speak the Agent Client Protocol on stdin/stdout for an editor (Zed, a
JetBrains IDE, any ACP client), backed by the daemons of the workspaces its sessions are in."""

import argparse

from tether.clients.cli.targets import workspace


def cmd_acp(args: argparse.Namespace) -> int:
    from tether.clients.acp.agent import serve

    return serve(workspace(args))
