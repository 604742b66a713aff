"""Commands on a session's turns: `tether run` starts one, `attach` follows the running one,
`cancel` stops it."""

import argparse
import sys

from tether.clients.cli.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    STATUS_EXIT,
    CliError,
)
from tether.clients.cli.follow import Detached, Follower
from tether.clients.cli.mentions import parse_cli_mentions
from tether.clients.cli.piped import read_piped, stdin_may_hold_text
from tether.clients.cli.render import Renderer
from tether.clients.cli.targets import connect, resolve_session
from tether.protocol.events import TurnStatus
from tether.protocol.methods import (
    SESSION_CREATE,
    TURN_CANCEL,
    TURN_START,
    Attachment,
    SessionCreateParams,
    TurnCancelParams,
    TurnStartParams,
)


def cmd_run(args: argparse.Namespace) -> int:
    prompt = " ".join(args.prompt).strip()
    stdin = sys.stdin
    terminal = stdin is not None and stdin.isatty()
    piped = read_piped(
        stdin.buffer if stdin is not None else None, may_hold_text=stdin_may_hold_text()
    )
    attachments: list[Attachment] = []
    if not prompt:
        prompt = (piped or "").strip()
    elif piped and piped.strip():
        attachments.append(Attachment(name="stdin", text=piped))
    if not prompt:
        raise CliError(
            "give the prompt as arguments (tether run 'what does main.py do?') or on stdin",
            EXIT_USAGE,
        )
    with connect(args) as client:
        if args.session or args.continue_latest:
            session = resolve_session(client, args.session)
        else:
            session = client.call(SESSION_CREATE, SessionCreateParams()).session
        renderer = Renderer(json_mode=args.json)
        follower = Follower(
            client,
            session.id,
            renderer,
            interactive=terminal and not args.json,
            approval_timeout=args.approval_timeout,
        )
        if not args.detach:
            follower.attach()
        started = client.call(
            TURN_START,
            TurnStartParams(
                session_id=session.id,
                text=prompt,
                permission_mode=args.permission_mode,
                model=args.model,
                mentions=parse_cli_mentions(prompt),
                attachments=attachments,
            ),
        )
        turn_id = started.turn_id
        if not args.json:
            for problem in started.problems:
                print(f"tether: {problem}", file=sys.stderr)
        if started.queued and not args.json:
            print(
                f"tether: a turn is running in {session.id}; your message joins it at its next"
                " step",
                file=sys.stderr,
            )
        if args.detach:
            print(session.id)
            return EXIT_OK
        status = follower.follow(turn_id)
        if not args.json and status != "completed":
            _say_go_on(f"turn {status} (session {session.id}){_why(status)}", session.id)
        return STATUS_EXIT[status]


_WHY: dict[TurnStatus, str] = {
    "interrupted": ": the daemon stopped while it ran",
    "paused": ": it reached its step budget",
}


def _say_go_on(what: str, session_id: str) -> None:
    """Tell the user on stderr that `what` happened, and how to continue the session."""
    print(f"tether: {what}; to go on: `tether run -s {session_id} continue`", file=sys.stderr)


def _why(status: TurnStatus) -> str:
    return _WHY.get(status, "")


def cmd_attach(args: argparse.Namespace) -> int:
    """Show the session and follow its running turn; the exit code is how its last turn
    ended (Ctrl-C: `EXIT_INTERRUPTED`, the turn goes on)."""
    with connect(args) as client:
        session = resolve_session(client, args.session)
        renderer = Renderer(json_mode=args.json)
        tty = sys.stdin.isatty() and not args.json
        follower = Follower(client, session.id, renderer, interactive=tty, answer_approvals=tty)
        result = follower.attach()
        assert result.snapshot is not None
        renderer.snapshot(result.snapshot)
        turns = result.snapshot.turns
        if not turns:
            return EXIT_OK
        if turns[-1].status == "running":
            try:
                status = follower.follow(turns[-1].id, on_interrupt="detach")
            except Detached:
                return EXIT_INTERRUPTED
        else:
            status = turns[-1].status
        if not args.json and status != "completed":
            _say_go_on(f"the last turn of session {session.id} {status}{_why(status)}", session.id)
        return STATUS_EXIT[status]


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)
        result = client.call(TURN_CANCEL, TurnCancelParams(session_id=session.id))
    print(f"cancelled turn {result.turn_id} of session {session.id}")
    return EXIT_OK
