"""`tether fork`: a new session with a session's conversation up to a turn."""

import argparse
import sys

from tether.clients.cli.commands.output import print_json
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect, resolve_session
from tether.clients.core.rpc import Client
from tether.protocol.methods import (
    SESSION_FORK,
    SESSION_LIST,
    SESSION_READ,
    SessionForkParams,
    SessionRef,
)
from tether.protocol.session import SessionInfo


def latest_worked_in(client: Client) -> SessionInfo:
    """The session a bare `tether fork` forks: the newest one, passing over forks no turn was
    run in since they were made (the fork just made is the newest session, and forking again
    means the conversation forked from)."""
    newest = resolve_session(client, None)
    for info in client.call(SESSION_LIST).sessions:
        origin = info.forked_from
        if origin is None:
            return info
        turns = client.call(SESSION_READ, SessionRef(session_id=info.id)).snapshot.turns
        if (turns[-1].id if turns else "") != origin.turn_id:
            return info  # worked in since it was forked
    return newest


def cmd_fork(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.session is None:
            source = latest_worked_in(client)
        else:
            source = resolve_session(client, args.session)
        result = client.call(
            SESSION_FORK,
            SessionForkParams(session_id=source.id, turn_id=args.turn, title=args.title or ""),
        )
    fork = result.session
    if args.json:
        print_json(result)
        return EXIT_OK
    origin = fork.forked_from
    after = f" after turn {origin.turn_id}" if origin is not None and origin.turn_id else ""
    turns = f"{fork.turn_count} turn{'s' if fork.turn_count != 1 else ''}"
    print(fork.id)
    print(
        f"forked {source.id}{after} into {fork.id} ({turns}): {visible(fork.title)}",
        file=sys.stderr,
    )
    if result.note:
        print(visible(result.note), file=sys.stderr)
    print(
        f"continue it with: tether run -s {fork.id} '…'  (or tether chat -s {fork.id})",
        file=sys.stderr,
    )
    return EXIT_OK
