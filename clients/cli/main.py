"""The `tether` command: a thin client of the workspace daemon.

It imports the protocol and a blocking websocket, never the daemon (it starts the daemon as a
separate process when none is running), so that `tether run` against a warm daemon costs little
more than a Python start.

Exit codes: 0 the turn completed (or the command succeeded); 1 the turn failed or the command
was refused; 2 bad usage or no daemon; 3 the turn was cancelled or interrupted; 4 the turn paused
at its step budget.
"""

import argparse
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

import msgspec

from tether.clients.cli.mentions import parse_cli_mentions
from tether.clients.cli.render import Renderer, describe_subject, visible
from tether.clients.discovery import (
    DaemonUnavailable,
    NotRunning,
    find_workspace,
    locate,
    lock_path,
    probe_lock,
    terminate_holder,
    wait_until_stopped,
)
from tether.clients.rpc import CallError, Client
from tether.clients.websocket import WebSocketError
from tether.protocol.errors import ErrorCode
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    Decision,
    DecisionScope,
    TurnCompleted,
    TurnStatus,
)
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    DAEMON_SHUTDOWN,
    DAEMON_STATUS,
    PROCESS_KILL,
    PROCESS_LIST,
    SESSION_ATTACH,
    SESSION_COMPACT,
    SESSION_CREATE,
    SESSION_DELETE,
    SESSION_LIST,
    SESSION_READ,
    SESSION_UNDO,
    TURN_CANCEL,
    TURN_START,
    ApprovalRespondParams,
    DaemonEventParams,
    ProcessKillParams,
    SessionAttachParams,
    SessionAttachResult,
    SessionCreateParams,
    SessionEventParams,
    SessionRef,
    SessionUndoParams,
    SessionUndoResult,
    TurnCancelParams,
    TurnStartParams,
)
from tether.protocol.session import Cursor, SessionInfo

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_PAUSED = 4

STATUS_EXIT: dict[TurnStatus, int] = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "interrupted": EXIT_CANCELLED,
    "paused": EXIT_PAUSED,
    "running": EXIT_FAILED,
}

_json = msgspec.json.Encoder()


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _die(message: str, code: int) -> NoReturn:
    print(f"tether: {message}", file=sys.stderr)
    raise SystemExit(code)


def _workspace(args: argparse.Namespace) -> Path:
    given: str | None = getattr(args, "workspace", None)
    if given:
        path = Path(given).resolve()
        if not path.is_dir():
            raise CliError(f"{path} is not a directory", EXIT_USAGE)
        return path
    return find_workspace()


def _connect(args: argparse.Namespace, *, autostart: bool = True) -> Client:
    return Client.connect(_workspace(args), autostart=autostart)


def _resolve_session(client: Client, ref: str | None) -> SessionInfo:
    sessions = client.call(SESSION_LIST).sessions
    if not sessions:
        raise CliError("this workspace has no sessions yet; start one with `tether run`")
    if ref is None:
        return sessions[0]
    matches = [s for s in sessions if s.id == ref] or [s for s in sessions if s.id.startswith(ref)]
    if len(matches) != 1:
        raise CliError(
            f"no session matches {ref!r}" if not matches else f"{ref!r} matches several sessions"
        )
    return matches[0]


class Follower:
    """Follows one turn's events until it completes, re-attaching after a resync, and
    answers the turn's approvals: on the terminal when there is one, otherwise by denying
    them with a message saying why."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        renderer: Renderer,
        *,
        interactive: bool = False,
        answer_approvals: bool = True,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.renderer = renderer
        self.cursor = Cursor(seq=0)
        self.interactive = interactive
        self.answer_approvals = answer_approvals
        self._prompt = TerminalPrompt() if interactive else None
        self._asking: ApprovalRequest | None = None

    def attach(self, after: Cursor | None = None) -> SessionAttachResult:
        result = self.client.call(
            SESSION_ATTACH,
            SessionAttachParams(session_id=self.session_id, after=after, role="controller"),
        )
        self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
        return result

    def _respond(
        self, approval: ApprovalRequest, decision: Decision, scope: DecisionScope, message: str = ""
    ) -> None:
        try:
            self.client.call(
                APPROVAL_RESPOND,
                ApprovalRespondParams(
                    session_id=self.session_id,
                    approval_id=approval.id,
                    decision=decision,
                    scope=scope,
                    message=message,
                ),
            )
        except CallError as exc:
            if exc.code != ErrorCode.APPROVAL_RESOLVED:
                raise

    def _on_approval(self, approval: ApprovalRequest) -> None:
        if not self.answer_approvals:
            return
        if self._prompt is None:
            self._respond(
                approval,
                "deny",
                "once",
                "tether run has no terminal to ask on; approve from another terminal with "
                "`tether approve`, or choose a --permission-mode",
            )
            return
        self._asking = approval
        self._prompt.ask("allow? [y]es / [a]lways / [n]o: ")

    def _poll_answer(self) -> None:
        if self._prompt is None or self._asking is None:
            return
        answer = self._prompt.answer()
        if answer is None:
            return
        approval, self._asking = self._asking, None
        choice = answer.strip().lower()[:1]
        if choice == "a":
            self._respond(approval, "allow", "always")
        elif choice == "y":
            self._respond(approval, "allow", "once")
        else:
            self._respond(approval, "deny", "once", "denied at the terminal")

    def follow(self, turn_id: str) -> TurnStatus:
        cancelled = False
        while True:
            try:
                self._poll_answer()
                try:
                    method, params = self.client.next_notification(
                        timeout=0.1 if self._asking is not None else None
                    )
                except TimeoutError:
                    continue
            except KeyboardInterrupt:
                if cancelled:
                    raise
                cancelled = True
                print("\ntether: cancelling (Ctrl-C again to leave it)", file=sys.stderr)
                self.client.call(
                    TURN_CANCEL,
                    TurnCancelParams(session_id=self.session_id, turn_id=turn_id),
                )
                continue
            if method == "session/resync":
                self.attach(self.cursor)
                continue
            if isinstance(params, DaemonEventParams):
                print(f"tether: {visible(params.message)}", file=sys.stderr)
                continue
            if not isinstance(params, SessionEventParams) or params.session_id != self.session_id:
                continue
            self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
            event_turn = getattr(params.event, "turn_id", None)
            if event_turn is not None and event_turn != turn_id:
                continue  # another turn's events; session-wide ones (renames) still show
            self.renderer.event(params)
            match params.event:
                case ApprovalRequested(approval=approval) if approval.turn_id == turn_id:
                    self._on_approval(approval)
                case ApprovalResolved(approval_id=approval_id) if (
                    self._asking is not None and self._asking.id == approval_id
                ):
                    self._asking = None  # answered elsewhere; the prompt's line is ignored
                    if self._prompt is not None:
                        self._prompt.discard()
                case TurnCompleted(status=status):
                    return status
                case _:
                    pass


class TerminalPrompt:
    """Reads one answer line from the terminal on a thread, so that events keep flowing (and
    another client's answer can win) while the person decides."""

    def __init__(self) -> None:
        self._answers: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reading = False
        self._discard = 0

    def ask(self, prompt: str) -> None:
        sys.stderr.write(prompt)
        sys.stderr.flush()
        if not self._reading:
            self._reading = True
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        line = sys.stdin.readline()
        self._answers.put(line or "n")
        self._reading = False

    def discard(self) -> None:
        sys.stderr.write("(answered elsewhere)\n")
        self._discard += 1

    def answer(self) -> str | None:
        while True:
            try:
                line = self._answers.get_nowait()
            except queue.Empty:
                return None
            if self._discard:
                self._discard -= 1
                continue
            return line


def cmd_run(args: argparse.Namespace) -> int:
    prompt = " ".join(args.prompt).strip()
    if not prompt:
        raise CliError("give the prompt as arguments: tether run 'what does main.py do?'", 2)
    with _connect(args) as client:
        if args.session:
            session = _resolve_session(client, args.session)
        else:
            session = client.call(SESSION_CREATE, SessionCreateParams()).session
        renderer = Renderer(json_mode=args.json)
        follower = Follower(
            client,
            session.id,
            renderer,
            interactive=sys.stdin.isatty() and not args.json,
        )
        if not args.detach:
            follower.attach()
        started = client.call(
            TURN_START,
            TurnStartParams(
                session_id=session.id,
                text=prompt,
                permission_mode=args.permission_mode,
                mentions=parse_cli_mentions(prompt),
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
            print(f"tether: turn {status} (session {session.id})", file=sys.stderr)
        return STATUS_EXIT[status]


def cmd_attach(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        session = _resolve_session(client, args.session)
        renderer = Renderer(json_mode=args.json)
        tty = sys.stdin.isatty() and not args.json
        follower = Follower(client, session.id, renderer, interactive=tty, answer_approvals=tty)
        result = follower.attach()
        assert result.snapshot is not None
        renderer.snapshot(result.snapshot)
        turns = result.snapshot.turns
        if not turns or turns[-1].status != "running":
            return EXIT_OK
        return STATUS_EXIT[follower.follow(turns[-1].id)]


def _pick_approval(client: Client, args: argparse.Namespace) -> tuple[str, ApprovalRequest]:
    session = _resolve_session(client, args.session)
    snapshot = client.call(SESSION_READ, SessionRef(session_id=session.id)).snapshot
    pending = snapshot.pending_approvals
    if args.approval:
        pending = [a for a in pending if a.id.startswith(args.approval)]
    if not pending:
        raise CliError(f"no pending approval in session {session.id}")
    if len(pending) > 1:
        listing = "\n".join(f"  {a.id}  {visible(a.tool)}: {describe_subject(a)}" for a in pending)
        raise CliError(f"several approvals are pending; name one:\n{listing}")
    return session.id, pending[0]


def cmd_answer(args: argparse.Namespace) -> int:
    decision: Decision = "allow" if args.command == "approve" else "deny"
    with _connect(args, autostart=False) as client:
        session_id, approval = _pick_approval(client, args)
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=session_id,
                approval_id=approval.id,
                decision=decision,
                scope="always" if getattr(args, "always", False) else "once",
                message=args.message,
            ),
        )
    verb = "allowed" if decision == "allow" else "denied"
    print(f"{verb} {visible(approval.tool)}: {describe_subject(approval)}")
    return EXIT_OK


def cmd_undo(args: argparse.Namespace) -> int:
    with _connect(args, autostart=False) as client:
        session = _resolve_session(client, args.session)

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
        print(_json.encode(result).decode())
        return EXIT_OK
    for path in result.restored:
        print(f"restored {path}")
    for path in result.removed:
        print(f"removed  {path}")
    if result.note:
        print(result.note, file=sys.stderr)
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    with _connect(args, autostart=False) as client:
        session = _resolve_session(client, args.session)
        result = client.call(SESSION_COMPACT, SessionRef(session_id=session.id))
    if result.compacted:
        print(f"compacted {session.id}: {result.tokens_before:,} -> {result.tokens_after:,} tokens")
    else:
        print(f"nothing compacted in {session.id}: {result.reason}")
    return EXIT_OK


def cmd_processes(args: argparse.Namespace) -> int:
    with _connect(args, autostart=False) as client:
        if args.kill:
            client.call(PROCESS_KILL, ProcessKillParams(process_id=args.kill))
            print(f"stopped {args.kill}")
            return EXIT_OK
        processes = client.call(PROCESS_LIST).processes
    if args.json:
        print(_json.encode(processes).decode())
        return EXIT_OK
    if not processes:
        print("no background processes")
    for p in processes:
        code = "" if p.exit_code is None else f" ({p.exit_code})"
        print(f"{p.id}  pid {p.pid:<7} {p.status}{code}  {visible(p.command)}")
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.delete:
        with _connect(args) as client:
            session = _resolve_session(client, args.delete)
            client.call(SESSION_DELETE, SessionRef(session_id=session.id))
        print(f"deleted session {session.id}")
        return EXIT_OK
    with _connect(args) as client:
        sessions = client.call(SESSION_LIST).sessions
    if args.json:
        print(_json.encode(sessions).decode())
        return EXIT_OK
    if not sessions:
        print("no sessions yet")
    now = time.time()
    for s in sessions:
        age = _age(now - s.updated_at)
        print(f"{s.id}  {s.status:<7}  {s.turn_count:>3} turns  {age:>8}  {visible(s.title)}")
    return EXIT_OK


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def cmd_cancel(args: argparse.Namespace) -> int:
    with _connect(args, autostart=False) as client:
        session = _resolve_session(client, args.session)
        result = client.call(TURN_CANCEL, TurnCancelParams(session_id=session.id))
    print(f"cancelled turn {result.turn_id} of session {session.id}")
    return EXIT_OK


def cmd_daemon(args: argparse.Namespace) -> int:
    workspace = _workspace(args)
    if args.action == "start":
        located = locate(workspace, idle_timeout=args.idle_timeout)
        info, started = located.info, located.started
        fields = {
            "running": True,
            "started": started,
            "pid": info.pid,
            "port": info.port,
            "workspace": info.workspace,
            "version": info.daemon_version,
        }
        if args.json:
            print(_json.encode(fields).decode())
        else:
            verb = "started" if started else "already running"
            print(f"tether daemon {verb}: pid {info.pid}, port {info.port}, {info.workspace}")
        return EXIT_OK
    try:
        info = locate(workspace, autostart=False).info
    except NotRunning:
        if args.json:
            print(_json.encode({"running": False, "workspace": str(workspace)}).decode())
        else:
            print(f"no tether daemon is running for {workspace}")
        return EXIT_OK if args.action == "stop" else EXIT_FAILED
    except DaemonUnavailable as exc:
        if args.action != "stop" or exc.holder is None:
            raise
        # It holds the workspace without serving it: no RPC reaches it, a signal does.
        terminate_holder(workspace, exc.holder)
        pid = exc.holder.pid
    else:
        if args.action == "status":
            return _print_status(args, workspace, info.port)
        with Client.connect(workspace, autostart=False) as client:
            client.call(DAEMON_SHUTDOWN)
        pid = info.pid
    if not wait_until_stopped(workspace):
        raise CliError(f"the daemon (pid {pid}) did not stop within 15 s")
    print(f"tether daemon stopped (pid {pid})")
    return EXIT_OK


def _print_status(args: argparse.Namespace, workspace: Path, port: int) -> int:
    with Client.connect(workspace, autostart=False) as client:
        status = client.call(DAEMON_STATUS)
    if args.json:
        data = msgspec.to_builtins(status)
        assert isinstance(data, dict)
        data["running"] = True
        data["port"] = port
        print(_json.encode(data).decode())
    else:
        print(
            f"tether daemon running: pid {status.pid}, port {port}, {status.workspace}\n"
            f"  clients {status.clients}, sessions loaded {status.sessions_loaded},"
            f" running turns {status.running_turns}, version {status.daemon_version}"
        )
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from tether.clients.cli import doctor

    workspace = _workspace(args)
    held = probe_lock(lock_path(workspace))
    pid = held.record.pid if held is not None and held.record is not None else None
    lines, healthy = doctor.report(workspace, pid)
    print("\n".join(lines))
    return EXIT_OK if healthy else EXIT_FAILED


def cmd_demo(args: argparse.Namespace) -> int:
    from tether.clients.cli import demo

    print(demo.BANNER, file=sys.stderr)
    folder = demo.scratch()
    project = folder / "greeter"
    demo.make_project(project)
    model, url = demo.start_model_server(demo.write_script(folder))
    env = {**os.environ, "TETHER_BASE_URL": url, "TETHER_MODEL": "scripted"}
    try:
        locate(project, idle_timeout=60, env=env)
        with Client.connect(project, autostart=False) as client:
            print(f"workspace: {project}\n» what is this project?\n", file=sys.stderr)
            session = client.call(SESSION_CREATE, SessionCreateParams(title="demo")).session
            follower = Follower(
                client, session.id, Renderer(json_mode=args.json), answer_approvals=False
            )
            follower.attach()
            turn_id = client.call(
                TURN_START,
                TurnStartParams(session_id=session.id, text="What is this project?"),
            ).turn_id
            status = follower.follow(turn_id)
            client.call(DAEMON_SHUTDOWN)
        # The demo's daemon is this process's child: wait for it to finish stopping (it
        # releases its lock last), so nothing of the demo outlives the command.
        wait_until_stopped(project)
    finally:
        model.terminate()
        model.wait(timeout=10)
        demo.cleanup(folder)
    print(f"\ndemo turn {status}.", file=sys.stderr)
    return STATUS_EXIT[status]


def cmd_dev(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "tether.testing", *args.rest]
    os.execv(sys.executable, argv)


def build_parser() -> argparse.ArgumentParser:
    # Accepted before or after the subcommand; SUPPRESS keeps the subcommand's parser from
    # overwriting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--workspace",
        "-w",
        default=argparse.SUPPRESS,
        help="project folder (default: the git root above the current one)",
    )
    parser = argparse.ArgumentParser(
        prog="tether", description="A coding agent in a per-workspace daemon.", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", parents=[common], help="run the agent on a prompt")
    run.add_argument("prompt", nargs="*", help="what to do")
    run.add_argument("--session", "-s", help="continue this session (id or prefix)")
    run.add_argument("--detach", "-d", action="store_true", help="print the session id, return")
    run.add_argument("--json", action="store_true", help="one JSON event per line")
    run.add_argument(
        "--permission-mode",
        choices=["ask", "edits", "auto"],
        default=None,
        help="ask: edits and commands ask; edits: commands ask; auto: nothing asks",
    )
    run.set_defaults(func=cmd_run)

    for verb in ("approve", "deny"):
        answer = sub.add_parser(
            verb, parents=[common], help=f"{verb} a pending approval from any terminal"
        )
        answer.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
        answer.add_argument("approval", nargs="?", help="approval id or prefix")
        answer.add_argument("--message", "-m", default="", help="told to the model")
        if verb == "approve":
            answer.add_argument(
                "--always", action="store_true", help="also allow such calls for the session"
            )
        answer.set_defaults(func=cmd_answer)

    attach = sub.add_parser("attach", parents=[common], help="catch up with a session, follow it")
    attach.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    attach.add_argument("--json", action="store_true")
    attach.set_defaults(func=cmd_attach)

    sessions = sub.add_parser("sessions", parents=[common], help="list (or delete) sessions")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument(
        "--delete",
        metavar="ID",
        help="delete a session (id or unique prefix) with its history and undo snapshots",
    )
    sessions.set_defaults(func=cmd_sessions)

    undo = sub.add_parser("undo", parents=[common], help="restore the files a turn changed")
    undo.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    undo.add_argument("--turn", help="the turn (default: the latest that changed files)")
    undo.add_argument("--force", action="store_true", help="also overwrite files changed since")
    undo.add_argument("--json", action="store_true")
    undo.set_defaults(func=cmd_undo)

    compact = sub.add_parser(
        "compact", parents=[common], help="summarise a session's older history now"
    )
    compact.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    compact.set_defaults(func=cmd_compact)

    processes = sub.add_parser(
        "processes", parents=[common], help="background processes the daemon owns"
    )
    processes.add_argument("--kill", metavar="ID", help="stop one (its whole process tree)")
    processes.add_argument("--json", action="store_true")
    processes.set_defaults(func=cmd_processes)

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a session's running turn")
    cancel.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    cancel.set_defaults(func=cmd_cancel)

    daemon = sub.add_parser("daemon", parents=[common], help="start, stop or inspect the daemon")
    daemon.add_argument("action", choices=["start", "stop", "status"])
    daemon.add_argument("--json", action="store_true")
    daemon.add_argument("--idle-timeout", type=float, default=None, help="seconds (0 = never)")
    daemon.set_defaults(func=cmd_daemon)

    doctor = sub.add_parser(
        "doctor",
        parents=[common],
        help="check the workspace's session database (read-only) and say how to recover",
    )
    doctor.set_defaults(func=cmd_doctor)

    demo = sub.add_parser("demo", help="see tether work end to end, with a scripted model")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=cmd_demo)

    dev = sub.add_parser("dev", help="tools for plugin authors")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    model_server = dev_sub.add_parser(
        "model-server",
        help="serve a scripted fake model (OpenAI chat completions and Anthropic Messages)",
        add_help=False,
        # No option of its own: with "-" a prefix, argparse would take a leading `--script`
        # for an unknown option of this parser instead of handing it on with the rest.
        prefix_chars="\0",
    )
    model_server.add_argument("rest", nargs=argparse.REMAINDER)
    model_server.set_defaults(func=cmd_dev)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        _die(str(exc), exc.code)
    except DaemonUnavailable as exc:
        _die(str(exc), EXIT_USAGE)
    except CallError as exc:
        _die(exc.message, EXIT_FAILED)
    except (WebSocketError, ConnectionError) as exc:
        _die(f"lost the connection to the daemon: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
