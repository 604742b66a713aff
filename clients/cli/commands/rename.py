"""`tether rename`: give a session a title (none: back to the automatic one)."""

import argparse

from tether.clients.cli.commands.output import print_json
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect, resolve_session
from tether.protocol.methods import SESSION_RENAME, SessionRenameParams


def cmd_rename(args: argparse.Namespace) -> int:
    title = " ".join(args.title)
    with connect(args) as client:
        session = resolve_session(client, args.session)
        result = client.call(
            SESSION_RENAME, SessionRenameParams(session_id=session.id, title=title)
        )
    if args.json:
        print_json(result.session)
    elif result.session.title:
        print(f"{session.id}  {visible(result.session.title)}")
    else:
        print(f"{session.id}  (no title yet: its first message gives it one)")
    return EXIT_OK
