"""Commands on a workspace's sessions: `tether sessions` lists (deletes, or searches) them, `undo`
restores the files a turn changed, `compact` summarises a session's older history now."""

import argparse
import sys
import time

from tether.clients.cli.commands.output import age, print_json, print_listing
from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.render import visible
from tether.clients.cli.targets import configured_model, connect, resolve_session
from tether.protocol.errors import ErrorCode
from tether.protocol.methods import (
    SESSION_COMPACT,
    SESSION_DELETE,
    SESSION_LIST,
    SESSION_UNDO,
    SessionDeleteParams,
    SessionRef,
    SessionUndoParams,
    SessionUndoResult,
)
from tether.protocol.session import SessionInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.clients.core.rpc import Client


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.search is not None:
        from tether.clients.cli.commands.search import cmd_search

        return cmd_search(args)
    if args.delete:
        with connect(args) as client:
            session = resolve_session(client, args.delete)
            delete_session(client, session.id, force=args.force)
        print(f"deleted session {session.id}")
        return EXIT_OK
    with connect(args) as client:
        sessions = client.call(SESSION_LIST).sessions
        configured = "" if args.json or not sessions else configured_model(client)
    now = time.time()
    if sessions and not args.json and sys.stdout.isatty():
        # On a terminal only: a script reading the lines (`| head -1`) gets sessions alone.
        print(f"{'SESSION':<{len(sessions[0].id)}}  {HEADER}")
    return print_listing(
        sessions,
        as_json=args.json,
        empty="no sessions yet",
        line=lambda s: f"{s.id}  {describe_session(s, now, configured)}",
    )


def delete_session(client: "Client", session_id: str, *, force: bool) -> None:
    """Delete the session; when its worktree holds changes not merged, ask first on a
    terminal (elsewhere the daemon's refusal stands: `--force` deletes anyway)."""
    from tether.clients.core.call_error import CallError

    try:
        client.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id, force=force))
    except CallError as exc:
        if exc.code != ErrorCode.WORKTREE_UNMERGED or not sys.stdin.isatty():
            raise
        print(f"tether: {exc.message}", file=sys.stderr)
        answer = input("delete it and lose those changes? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise CliError("kept the session and its worktree", EXIT_USAGE) from None
        client.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id, force=True))


STATE_LABELS = {"awaiting_approval": "needs approval"}
"""How `tether sessions` words a session's state where the wire's name is not plain English."""

HEADER = f"{'STATE':<16}  {'TURNS':>9}  {'USED':>8}  {'MODEL':<16}  TITLE"


def describe_session(s: SessionInfo, now: float, configured: str = "") -> str:
    """A session's state, turns, age, model and title on one line (its id not included). A
    session without a model of its own shows `configured` (the model it uses), else `-`."""
    when = age(now - s.updated_at)
    state = STATE_LABELS.get(s.state, s.state)
    model = visible(s.model or configured) or "-"
    fork = f"  (fork of {s.forked_from.session_id})" if s.forked_from is not None else ""
    return f"{state:<16}  {s.turn_count:>3} turns  {when:>8}  {model:<16}  {visible(s.title)}{fork}"


def cmd_undo(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)

        def undo(force: bool) -> SessionUndoResult:
            return client.call(
                SESSION_UNDO,
                SessionUndoParams(session_id=session.id, turn_id=args.turn, force=force),
            )

        result = undo(args.force)
        if not result.applied:
            print(f"these files changed after turn {result.turn_id} ended:", file=sys.stderr)
            for path in result.conflicts:
                print(f"  {path}", file=sys.stderr)
            if not sys.stdin.isatty():
                raise CliError("nothing was undone; run again with --force to overwrite them")
            sys.stderr.write("overwrite them too? [y/N] ")
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower()[:1] != "y":
                raise CliError("nothing was undone")
            result = undo(True)
    if args.json:
        print_json(result)
        return EXIT_OK
    for path in result.restored:
        print(f"restored {path}")
    for path in result.removed:
        print(f"removed  {path}")
    if result.note:
        print(result.note, file=sys.stderr)
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)
        result = client.call(SESSION_COMPACT, SessionRef(session_id=session.id))
    if result.compacted:
        print(f"compacted {session.id}: {result.tokens_before:,} -> {result.tokens_after:,} tokens")
    else:
        print(f"nothing compacted in {session.id}: {result.reason}")
    return EXIT_OK
