"""`tether trust`: trust the workspace (its language servers may run its own TypeScript and
Python environment, its skills are used without asking); `--revoke` withdraws it, `--status`
only tells."""

import argparse
import sys
from datetime import datetime

from tether.clients.cli.commands.output import print_json
from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import WORKSPACE_TRUST, WorkspaceTrustParams, WorkspaceTrustResult


def describe_trust(result: WorkspaceTrustResult) -> str:
    """One line: whether the workspace is trusted, who said so and when, and where it is."""
    said = [f"by {visible(result.by)}"] if result.by else []
    if result.at is not None:
        said.append(datetime.fromtimestamp(result.at).strftime("%Y-%m-%d %H:%M"))
    when = f" ({', '.join(said)})" if said else ""
    if result.trusted:
        return f"workspace trusted{when}: {result.workspace}"
    return (
        f"workspace not trusted{when}: {result.workspace}; language servers run restricted, "
        "workspace skills ask first (tether trust to trust it)"
    )


def cmd_trust(args: argparse.Namespace) -> int:
    if args.revoke and args.status:
        print("tether trust: --revoke and --status do not go together", file=sys.stderr)
        return EXIT_USAGE
    trusted = None if args.status else not args.revoke
    with connect(args) as client:
        result = client.call(WORKSPACE_TRUST, WorkspaceTrustParams(trusted=trusted))
    if args.json:
        print_json(result)
    else:
        print(describe_trust(result))
    return EXIT_OK
