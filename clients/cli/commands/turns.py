"""Commands on a session's turns: `tether run` starts one, `attach` follows the running one,
`cancel` stops it.

`tether run` in a new session against a running daemon sends its turn from a `Prelude`, before
msgspec, the protocol's types and the renderer are imported: the model is then called while
those load, and the turn's events, from its first, are replayed to the client once it attaches.
"""

import argparse
import os
import sys

from tether.clients.cli.ctrl_c import HeldCtrlC
from tether.clients.cli.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    STATUS_EXIT,
    CliError,
)
from tether.clients.cli.mentions import parse_cli_mentions
from tether.clients.cli.piped import read_piped, stdin_may_hold_text
from tether.clients.cli.targets import connect, resolve_session, workspace
from tether.clients.core.call_error import CallError
from tether.clients.core.prelude import JsonObject, Prelude, as_object
from tether.protocol.environment import without_secrets

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tether.clients.cli.images import ImageFile
    from tether.clients.core.rpc import Client
    from tether.protocol.events import PermissionMode, TurnStatus
    from tether.protocol.methods import TurnStartResult

CLIENT_NAME = "tether-cli"


class RunRequest:
    """What `tether run` asks: the prompt, the files it mentions and the attached texts."""

    def __init__(
        self,
        prompt: str,
        attachments: "list[tuple[str, str]] | None" = None,
        permission_mode: "PermissionMode | None" = None,
        model: str | None = None,
        images: "list[ImageFile] | None" = None,
        env: "Mapping[str, str] | None" = None,
        max_input: int | None = None,
    ) -> None:
        self.prompt = prompt
        self.max_input = max_input
        """The tokens the prompt may take (`--max-input`; None: the daemon's default)."""
        self.attachments = attachments or []
        """(name, text) of each attached text."""
        self.images = images or []
        """The image files sent with the prompt (`--image`)."""
        self.mentions = parse_cli_mentions(prompt)
        self.permission_mode: PermissionMode | None = permission_mode
        self.model = model
        self.env = without_secrets(os.environ if env is None else env)
        """The environment the turn's commands run in: this shell's (default), without the
        variables whose names look secret."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RunRequest":
        """The request of `tether run`'s arguments and piped stdin (`CliError` when neither
        gives a prompt)."""
        prompt = " ".join(args.prompt).strip()
        images: list[ImageFile] = []
        if args.image:
            from tether.clients.cli.images import read_images

            images = read_images(args.image)
        stdin = sys.stdin
        piped = read_piped(
            stdin.buffer if stdin is not None else None,
            may_hold_text=stdin_may_hold_text(),
            on_cut=_say_stdin_cut,
        )
        attachments: list[tuple[str, str]] = []
        if not prompt:
            prompt = (piped or "").strip()
        elif piped and piped.strip():
            attachments.append(("stdin", piped))
        if not prompt:
            raise CliError(
                "give the prompt as arguments (tether run 'what does main.py do?') or on stdin",
                EXIT_USAGE,
            )
        return cls(
            prompt,
            attachments,
            args.permission_mode,
            args.model,
            images,
            max_input=args.max_input,
        )

    def turn_start(self, session_id: str) -> JsonObject:
        """`turn/start`'s params on the wire (as `TurnStartParams` encodes them)."""
        params: JsonObject = {"sessionId": session_id, "text": self.prompt}
        if self.mentions:
            params["mentions"] = self.mentions
        if self.attachments:
            params["attachments"] = [{"name": n, "text": t} for n, t in self.attachments]
        if self.images:
            params["images"] = [image.wire() for image in self.images]
        if self.permission_mode is not None:
            params["permissionMode"] = self.permission_mode
        if self.model is not None:
            params["model"] = self.model
        if self.max_input is not None:
            params["maxInputTokens"] = self.max_input
        params["env"] = dict(self.env)
        return params


def _say_stdin_cut(total: int, skipped: int) -> None:
    print(
        f"tether: stdin: {total:,} bytes, of which the middle {skipped:,} are left out of what"
        " is sent",
        file=sys.stderr,
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Start the turn and follow it. Ctrl-C from the first instant means cancel: before the
    session is asked for it just ends the command; from then on it is held (`HeldCtrlC`) and
    acted on once it can be (the new session deleted, or the started turn cancelled)."""
    request = RunRequest.from_args(args)  # its options' combinations: `args.usage_error`
    ctrl_c = HeldCtrlC()
    try:
        return _run(args, request, ctrl_c)
    finally:
        ctrl_c.release()


def _run(args: argparse.Namespace, request: RunRequest, ctrl_c: HeldCtrlC) -> int:
    prelude = None
    if not (args.session or args.continue_latest):
        prelude = Prelude.open(workspace(args), client_name=CLIENT_NAME)
    if prelude is not None:
        try:
            ctrl_c.hold()
            created, _ = prelude.call("session/create", create_params(args))
            session_id = _session_id(created)
            if ctrl_c.pressed:
                prelude.call("session/delete", {"sessionId": session_id})
                prelude.close()
                return EXIT_INTERRUPTED
            try:
                _, frame = prelude.call("turn/start", request.turn_start(session_id))
            except CallError:
                # Refused (a prompt too large, an image the model cannot take): the session
                # made for it would stay empty.
                prelude.call("session/delete", {"sessionId": session_id})
                raise
        except BaseException:
            prelude.close()
            raise
        with prelude.handover() as client:
            return _follow_run(args, client, session_id, frame, ctrl_c)
    with connect(args) as client:
        ctrl_c.hold()
        session_id, created = _session_of(args, client)
        return _follow_run(args, client, session_id, None, ctrl_c, request, created=created)


def _session_id(created: JsonObject) -> str:
    session = created.get("session")
    found = as_object(session)
    session_id = found.get("id") if found is not None else None
    if not isinstance(session_id, str):
        raise CliError("the daemon's answer to session/create names no session", EXIT_USAGE)
    return session_id


def _session_of(args: argparse.Namespace, client: "Client") -> tuple[str, bool]:
    """The session to run in, and whether it was created for this run."""
    from tether.protocol.methods import SESSION_CREATE, SessionCreateParams

    if args.session or args.continue_latest:
        return resolve_session(client, args.session).id, False
    params = SessionCreateParams()
    if args.worktree is not None:
        params = SessionCreateParams(
            title=args.worktree, isolation="worktree", base_ref=args.from_ref or ""
        )
    return client.call(SESSION_CREATE, params).session.id, True


def create_params(args: argparse.Namespace) -> JsonObject:
    """`session/create`'s params on the wire for `tether run`'s options."""
    if args.worktree is None:
        return {}
    params: JsonObject = {"isolation": "worktree", "title": args.worktree}
    if args.from_ref:
        params["baseRef"] = args.from_ref
    return params


def _follow_run(
    args: argparse.Namespace,
    client: "Client",
    session_id: str,
    started_frame: bytes | None,
    ctrl_c: HeldCtrlC,
    request: RunRequest | None = None,
    *,
    created: bool = False,
) -> int:
    """Follow the turn of `tether run`: one a prelude started (`started_frame`, its answer),
    or the one started here from `request` once attached, unless Ctrl-C came first (then
    the session, if `created` for this run, is deleted)."""
    from tether.clients.cli.follow import Follower
    from tether.clients.cli.render import Renderer
    from tether.protocol.methods import (
        SESSION_DELETE,
        TURN_CANCEL,
        TURN_START,
        SessionDeleteParams,
        TurnCancelParams,
    )
    from tether.protocol.session import Cursor

    renderer = Renderer(json_mode=args.json, verbose=args.verbose)
    follower = Follower(
        client,
        session_id,
        renderer,
        interactive=sys.stdin is not None and sys.stdin.isatty() and not args.json,
        approval_timeout=args.approval_timeout,
        bell=not args.quiet,
    )
    if started_frame is not None:
        started: TurnStartResult = client.read_answer(TURN_START, started_frame)
        if not args.detach:
            # The turn began before this attach: its events, from the session's first,
            # are replayed.
            follower.attach(Cursor(seq=0))
    else:
        assert request is not None
        if not args.detach:
            follower.attach()
        if ctrl_c.pressed:
            if created:
                client.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id))
            return EXIT_INTERRUPTED
        try:
            started = _start_turn(client, session_id, request)
        except CallError:
            if created:  # refused: the session made for it would stay empty
                client.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id))
            raise
    if not args.json:
        for problem in started.problems:
            print(f"tether: {problem}", file=sys.stderr)
    if started.queued and not args.json:
        print(
            f"tether: a turn is running in {session_id}; your message joins it at its next step",
            file=sys.stderr,
        )
    if args.detach:
        if ctrl_c.release():
            client.call(
                TURN_CANCEL, TurnCancelParams(session_id=session_id, turn_id=started.turn_id)
            )
            return EXIT_INTERRUPTED
        print(session_id)
        return EXIT_OK
    status = follower.follow(started.turn_id, held=ctrl_c)
    error = follower.error
    if status == "failed" and error is not None and error.code in NOT_REACHED:
        # Going on cannot help before the cause is fixed; a session made for this prompt
        # alone holds nothing the model saw.
        made_here = not (args.session or args.continue_latest)
        if made_here:
            from tether.protocol.methods import SESSION_DELETE, SessionDeleteParams

            client.call(SESSION_DELETE, SessionDeleteParams(session_id=session_id))
        if not args.json:
            kept = "no session was kept" if made_here else f"{session_id} keeps the failed turn"
            print(f"tether: {NOT_REACHED[error.code]}, then run it again ({kept})", file=sys.stderr)
    elif not args.json and status != "completed":
        _say_go_on(f"turn {status} (session {session_id}){_why(status)}", session_id)
    return STATUS_EXIT[status]


def _start_turn(client: "Client", session_id: str, request: RunRequest) -> "TurnStartResult":
    from tether.protocol.methods import TURN_START, Attachment, ImageInput, TurnStartParams

    return client.call(
        TURN_START,
        TurnStartParams(
            session_id=session_id,
            text=request.prompt,
            permission_mode=request.permission_mode,
            model=request.model,
            mentions=request.mentions,
            attachments=[Attachment(name=n, text=t) for n, t in request.attachments],
            images=[
                ImageInput(name=i.name, mime_type=i.mime_type, data=i.data) for i in request.images
            ],
            env=request.env,
            max_input_tokens=request.max_input,
        ),
    )


NOT_REACHED = {
    "config_invalid": "the model was not asked: fix the config file as said above"
    " (`tether doctor` checks it)",
    "model_unreachable": "the model server was not reached: start it, or set TETHER_BASE_URL"
    " (or the config's base_url) to where it runs (`tether doctor` checks it)",
}
"""Turn errors that mean the model never saw the prompt, with what to fix."""


_WHY: "dict[TurnStatus, str]" = {
    "interrupted": ": the daemon stopped while it ran",
    "paused": ": it reached its step budget",
}


def _say_go_on(what: str, session_id: str) -> None:
    """Tell the user on stderr that `what` happened, and how to continue the session."""
    print(f"tether: {what}; to go on: `tether run -s {session_id} continue`", file=sys.stderr)


def _why(status: "TurnStatus") -> str:
    return _WHY.get(status, "")


def cmd_attach(args: argparse.Namespace) -> int:
    """Show the session and follow its running turn; the exit code is how its last turn
    ended (Ctrl-C: `EXIT_INTERRUPTED`, the turn goes on)."""
    from tether.clients.cli.follow import Detached, Follower
    from tether.clients.cli.render import Renderer

    with connect(args) as client:
        session = resolve_session(client, args.session)
        renderer = Renderer(json_mode=args.json, verbose=args.verbose)
        tty = sys.stdin.isatty() and not args.json
        follower = Follower(
            client,
            session.id,
            renderer,
            interactive=tty,
            answer_approvals=tty,
            bell=not args.quiet,
        )
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
            error = follower.error
        else:
            status, error = turns[-1].status, turns[-1].error
        if not args.json and status != "completed":
            last = f"the last turn of session {session.id} {status}"
            if status == "failed" and error is not None and error.code in NOT_REACHED:
                # Going on cannot help before the cause (shown above, with the turn) is fixed.
                print(
                    f"tether: {last}; {NOT_REACHED[error.code]}, then send the prompt again:"
                    f" `tether run -s {session.id} '…'`",
                    file=sys.stderr,
                )
            else:
                _say_go_on(f"{last}{_why(status)}", session.id)
        return STATUS_EXIT[status]


def cmd_cancel(args: argparse.Namespace) -> int:
    from tether.protocol.methods import TURN_CANCEL, TurnCancelParams

    with connect(args) as client:
        session = resolve_session(client, args.session)
        result = client.call(TURN_CANCEL, TurnCancelParams(session_id=session.id))
    print(f"cancelled turn {result.turn_id} of session {session.id}")
    return EXIT_OK
