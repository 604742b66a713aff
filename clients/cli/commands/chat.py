"""`tether` (no arguments) and `tether chat`: the interactive session. prompt_toolkit, and the
asyncio loop it runs on, are imported only here, so the other commands never pay for them."""

import argparse
import sys

from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.targets import resolve_session, workspace


def cmd_chat(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError(
            "the interactive mode needs a terminal; for a script use `tether run PROMPT`",
            EXIT_USAGE,
        )
    from tether.clients.cli.interactive.run import run_chat
    from tether.clients.core.channel import SharedClient

    root = workspace(args)
    client = SharedClient.connect(root)
    try:
        session_id: str | None = None
        if args.session or args.resume:
            session_id = resolve_session(client, args.session).id
        run_chat(
            client, root, session_id, permission_mode=args.permission_mode, bell=not args.quiet
        )
    finally:
        client.close()
    return EXIT_OK
