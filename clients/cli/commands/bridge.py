"""`tether bridge`: the workspace daemon's JSON-RPC as newline-delimited messages on stdin and
stdout (see `tether.clients.bridge` and `docs/bridge.md`)."""

import argparse
import sys

from tether.clients.bridge import Bridge
from tether.clients.cli.targets import workspace


def cmd_bridge(args: argparse.Namespace) -> int:
    return Bridge(workspace(args), sys.stdin.fileno(), sys.stdout.buffer).run()
