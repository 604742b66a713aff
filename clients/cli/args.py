"""The `tether` command line: its subcommands, their arguments and their help.

Each subcommand names its handler as `handler="module.function"` in `tether.clients.cli.commands`,
which `main` loads only once the arguments parse, so that building the parser imports no
command.
"""

import argparse
from collections.abc import Callable, Sequence

from tether.protocol.version import __version__


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines (0 or more)")
    return value


AddParser = Callable[..., argparse.ArgumentParser]
"""`add_parser` of the subcommands' action."""
Adder = Callable[[AddParser, argparse.ArgumentParser], None]
"""Adds one subcommand (or a family of them) with its arguments."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `tether` parser; a parsed command carries `handler`, its command's name.

    With `argv`, only the subcommand it names gets its parser (building every one costs more
    than the rest of a `tether run` before its turn starts); every subcommand does when `argv`
    names none of them, so that the help and the error for an unknown command list them all."""
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
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument(
        "--remote",
        metavar="[USER@]HOST[:PATH]",
        help="act on the workspace PATH on HOST over ssh: its daemon there, this terminal"
        " here (see docs/remote.md)",
    )
    parser.add_argument(
        "--remote-command",
        metavar="COMMAND",
        help="how the remote shell runs tether (default: TETHER_REMOTE_COMMAND, the config's"
        " remote_command, else `tether`)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = None if argv is None else command_word(argv)
    added: set[Adder] = set()
    for name, add in COMMANDS.items():
        if (wanted is None or name == wanted) and add not in added:
            added.add(add)
            add(sub.add_parser, common)
    return parser


VALUED_OPTIONS = ("--workspace", "-w", "--remote", "--remote-command")
"""The options before a subcommand that take a value (as the next word, or after `=`)."""


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names when it names one of `COMMANDS`: its first word that is
    neither an option nor the value of one of `VALUED_OPTIONS`."""
    words = iter(argv)
    for word in words:
        if word in VALUED_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _run(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    run = add_parser(
        "run",
        parents=[common],
        help="run the agent on a prompt",
        description="Run the agent on a prompt. Without a prompt argument, the prompt is read"
        " from stdin when stdin is not a terminal; with one, piped stdin is attached to the"
        " message as context (`cat build.log | tether run 'why does this fail?'`).",
    )
    run.add_argument("prompt", nargs="*", help="what to do")
    resume = run.add_mutually_exclusive_group()
    resume.add_argument("--session", "-s", help="continue this session (id or prefix)")
    resume.add_argument(
        "--continue",
        "-c",
        dest="continue_latest",
        action="store_true",
        help="continue the latest session",
    )
    run.add_argument("--detach", "-d", action="store_true", help="print the session id, return")
    run.add_argument("--json", action="store_true", help="one JSON event per line")
    run.add_argument(
        "--permission-mode",
        choices=["ask", "edits", "auto"],
        default=None,
        help="ask: edits and commands ask; edits: commands ask; auto: nothing asks",
    )
    run.add_argument(
        "--approval-timeout",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="without a terminal, wait this long for another client to answer an approval"
        " (longer while another controller is attached) before denying it (default 0: deny"
        " at once)",
    )
    run.add_argument(
        "--model",
        default=None,
        help="the model this session calls from now on (see `tether models`; '' for the"
        " configured one)",
    )
    run.add_argument(
        "--image",
        "-i",
        action="append",
        default=[],
        metavar="FILE",
        help="send this image (PNG, JPEG, GIF or WebP, up to 10 MB) with the prompt; may be"
        " repeated (`@shot.png` in the prompt sends a workspace image too)",
    )
    run.set_defaults(handler="turns.cmd_run")


def _listing(name: str, help_text: str, handler: str) -> Adder:
    """A subcommand that lists something, with `--json` as its only option."""

    def add(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
        command = add_parser(name, parents=[common], help=help_text)
        command.add_argument("--json", action="store_true")
        command.set_defaults(handler=handler)

    return add


_approvals = _listing(
    "approvals", "list the workspace's pending approvals", "approvals.cmd_approvals"
)
_models = _listing("models", "the models the model server offers (* = in use)", "models.cmd_models")
_skills = _listing(
    "skills", "the skills the agent can load, and the invalid ones", "skills.cmd_skills"
)
_hooks = _listing("hooks", "the hooks your config runs at tool calls and turns", "hooks.cmd_hooks")


def _chat(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    chat = add_parser("chat", parents=[common], help="an interactive session (also `tether` alone)")
    which = chat.add_mutually_exclusive_group()
    which.add_argument("--session", "-s", help="attach to this session (id or prefix)")
    which.add_argument(
        "--continue", "-c", dest="resume", action="store_true", help="the latest session"
    )
    chat.add_argument("--permission-mode", choices=["ask", "edits", "auto"], default=None)
    chat.set_defaults(handler="chat.cmd_chat")


def _answers(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    for verb in ("approve", "deny"):
        answer = add_parser(
            verb, parents=[common], help=f"{verb} a pending approval from any terminal"
        )
        answer.add_argument(
            "session",
            nargs="?",
            help="session id or prefix (default: the workspace's only pending approval; on a"
            " terminal, asks which when there are several)",
        )
        answer.add_argument("approval", nargs="?", help="approval id or prefix")
        answer.add_argument("--message", "-m", default="", help="told to the model")
        if verb == "approve":
            answer.add_argument(
                "--always", action="store_true", help="also allow such calls for the session"
            )
        answer.set_defaults(handler="approvals.cmd_answer")


def _attach(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    attach = add_parser("attach", parents=[common], help="catch up with a session, follow it")
    attach.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    attach.add_argument("--json", action="store_true")
    attach.set_defaults(handler="turns.cmd_attach")


def _sessions(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    sessions = add_parser("sessions", parents=[common], help="list (or delete) sessions")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument(
        "--delete",
        metavar="ID",
        help="delete a session (id or unique prefix) with its history and undo snapshots",
    )
    sessions.add_argument(
        "--search",
        metavar="TEXT",
        help="the prompts and answers that contain every word of TEXT, best first",
    )
    sessions.add_argument(
        "--limit", type=int, default=20, help="with --search: at most this many hits (200 max)"
    )
    sessions.add_argument(
        "--syntax",
        action="store_true",
        help='with --search: TEXT is an FTS5 query ("a phrase", OR, NOT, NEAR(a b), prefix*)',
    )
    sessions.set_defaults(handler="sessions.cmd_sessions")


def _fork(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    fork = add_parser(
        "fork",
        parents=[common],
        help="a new session with a session's conversation up to a turn (files are not copied)",
    )
    fork.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    fork.add_argument("--turn", help="the last turn to keep (default: every completed turn)")
    fork.add_argument("--title", help="the fork's title (default: the source's, with (fork))")
    fork.add_argument("--json", action="store_true")
    fork.set_defaults(handler="fork.cmd_fork")


def _rename(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    rename = add_parser("rename", parents=[common], help="give a session a title")
    rename.add_argument("session", help="session id or prefix")
    rename.add_argument(
        "title", nargs="*", help="the title (none: back to the first line of its first message)"
    )
    rename.add_argument("--json", action="store_true")
    rename.set_defaults(handler="rename.cmd_rename")


def _export(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    export = add_parser(
        "export", parents=[common], help="a session as a Markdown transcript or its event log"
    )
    export.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    export.add_argument(
        "--format",
        choices=["md", "json"],
        default="md",
        help="md: a readable transcript (default); json: every event, one JSON object a line",
    )
    export.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: stdout)")
    export.set_defaults(handler="export.cmd_export")


def _undo(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    undo = add_parser("undo", parents=[common], help="restore the files a turn changed")
    undo.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    undo.add_argument("--turn", help="the turn (default: the latest that changed files)")
    undo.add_argument("--force", action="store_true", help="also overwrite files changed since")
    undo.add_argument("--json", action="store_true")
    undo.set_defaults(handler="sessions.cmd_undo")


def _compact(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    compact = add_parser(
        "compact", parents=[common], help="summarise a session's older history now"
    )
    compact.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    compact.set_defaults(handler="sessions.cmd_compact")


def _processes(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    processes = add_parser(
        "processes", parents=[common], help="background processes the daemon owns"
    )
    processes.add_argument("--kill", metavar="ID", help="stop one (its whole process tree)")
    processes.add_argument(
        "--output", metavar="ID", help="the end of what one printed (the model's reads aside)"
    )
    processes.add_argument("--json", action="store_true")
    processes.set_defaults(handler="processes.cmd_processes")


def _mcp(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    mcp = add_parser("mcp", parents=[common], help="the MCP servers: state, revision, tools")
    mcp.add_argument(
        "action", nargs="?", choices=["approve"], help="approve: let a workspace's server run"
    )
    mcp.add_argument("name", nargs="?", help="the server to approve")
    mcp.add_argument("--json", action="store_true")
    mcp.set_defaults(handler="mcp.cmd_mcp")


def _cancel(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    cancel = add_parser("cancel", parents=[common], help="cancel a session's running turn")
    cancel.add_argument("session", nargs="?", help="session id or prefix (default: latest)")
    cancel.set_defaults(handler="turns.cmd_cancel")


def _daemon(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    daemon = add_parser(
        "daemon",
        parents=[common],
        help="start, stop or inspect the daemon, or read its log",
        description="`logs` reads the daemon's log files (the daemon need not run); see"
        " docs/logs.md. `ensure` starts it unless one runs and prints its discovery record"
        " (token included) as JSON: what `tether --remote` runs on the remote machine.",
    )
    daemon.add_argument("action", choices=["start", "stop", "restart", "status", "ensure", "logs"])
    daemon.add_argument(
        "--json", action="store_true", help="JSON output (logs: the lines as written)"
    )
    daemon.add_argument("--idle-timeout", type=float, default=None, help="seconds (0 = never)")
    daemon.add_argument(
        "--no-start", action="store_true", help="ensure: only report, start no daemon"
    )
    logs = daemon.add_argument_group("logs")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="then print new lines as they come"
    )
    logs.add_argument(
        "--level",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="only lines at or above this level",
    )
    logs.add_argument("--session", metavar="ID", help="only lines of this session (or prefix)")
    logs.add_argument(
        "-n", "--lines", type=_count, metavar="N", help="only the last N lines (-f: 10)"
    )
    daemon.set_defaults(handler="daemon.cmd_daemon")


def _doctor(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    doctor = add_parser(
        "doctor",
        parents=[common],
        help="check the workspace's session database (read-only) and say how to recover",
    )
    doctor.set_defaults(handler="daemon.cmd_doctor")


def _demo(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    demo = add_parser("demo", help="see tether work end to end, with a scripted model")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(handler="scripted_model.cmd_demo")


def _bridge(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    bridge = add_parser(
        "bridge",
        parents=[common],
        help="relay JSON-RPC lines on stdin/stdout to the daemon (for editors)",
        description="Relay newline-delimited JSON-RPC between stdin/stdout and the workspace's"
        " daemon, starting it when none runs; exits 0 when stdin closes. See docs/bridge.md.",
    )
    bridge.set_defaults(handler="bridge.cmd_bridge")


def _dev(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    dev = add_parser("dev", help="tools for plugin authors")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    model_server = dev_sub.add_parser(
        "model-server",
        help="serve a scripted fake model (OpenAI chat completions and Anthropic Messages)",
        description="Serve a scripted fake model on 127.0.0.1 until Ctrl-C; point a daemon at"
        " it with TETHER_BASE_URL=<the printed URL> TETHER_MODEL=scripted. The script format"
        " is in docs/model-server.md.",
    )
    model_server.add_argument("--script", required=True, metavar="FILE", help="the JSON script")
    model_server.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free port)"
    )
    model_server.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    model_server.add_argument(
        "--port-file", metavar="PATH", help="write the port to this file once listening"
    )
    model_server.set_defaults(handler="scripted_model.cmd_dev")


def _acp(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    acp = add_parser(
        "acp",
        parents=[common],
        help="be an Agent Client Protocol agent on stdin/stdout (for Zed, JetBrains, ...)",
        description="Speak the Agent Client Protocol (v1) on stdin/stdout, for an editor that"
        " starts tether as its agent. Each session lives in the daemon of the workspace its"
        " cwd is in; --workspace is where `session/list` looks when the editor names no cwd."
        " See docs/acp.md.",
    )
    acp.set_defaults(handler="acp.cmd_acp")


COMMANDS: dict[str, Adder] = {
    "run": _run,
    "approvals": _approvals,
    "chat": _chat,
    "approve": _answers,
    "deny": _answers,
    "attach": _attach,
    "sessions": _sessions,
    "fork": _fork,
    "rename": _rename,
    "export": _export,
    "undo": _undo,
    "compact": _compact,
    "processes": _processes,
    "cancel": _cancel,
    "daemon": _daemon,
    "models": _models,
    "skills": _skills,
    "hooks": _hooks,
    "mcp": _mcp,
    "doctor": _doctor,
    "demo": _demo,
    "bridge": _bridge,
    "dev": _dev,
    "acp": _acp,
}
"""Every subcommand, in the order the help lists them."""
