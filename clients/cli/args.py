"""The `tether` command line: its subcommands, their arguments and their help.

Each subcommand names its handler as `handler="module.function"` in `tether.clients.cli.commands`,
which `main` loads only once the arguments parse, so that building the parser imports no
command.
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from tether.protocol.version import __version__

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)
if TYPE_CHECKING:
    from typing import NoReturn


def _terminal_columns() -> int:
    """The width help is laid out for, by `shutil.get_terminal_size`'s rule: `$COLUMNS`, else
    the width of the terminal stdout is, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        stdout = sys.__stdout__
        return (os.get_terminal_size(stdout.fileno()).columns or 80) if stdout else 80
    except (ValueError, OSError):
        return 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, given the width: its own lookup imports shutil (and with it
    bz2, lzma and zlib), milliseconds of every command's start, for help that a command
    almost never prints. argparse makes a formatter at every `add_argument`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_terminal_columns() - 2)


class _EpilogFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of a description and an epilog (a table of settings)."""


class _Parser(argparse.ArgumentParser):
    def _get_formatter(self) -> argparse.HelpFormatter:
        chosen = self.formatter_class
        return (
            chosen if isinstance(chosen, type) and issubclass(chosen, _Formatter) else _Formatter
        )(self.prog)


class _TopParser(_Parser):
    """`tether`'s own parser: an option it does not know, given before any command, is named
    as the error (argparse would only say that a command is missing)."""

    given: Sequence[str] = ()
    """The arguments it is about to parse, when known."""

    def error(self, message: str) -> "NoReturn":
        if message.endswith("required: command"):
            known = self._option_string_actions
            unknown = [w for w in self.given if w.startswith("-") and w.split("=")[0] not in known]
            if unknown:
                message = (
                    f"unrecognized option {unknown[0]!r} before a command; a command's own"
                    " options go after it (`tether COMMAND --help` lists them)"
                )
        super().error(message)


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


def _tokens(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of tokens (1 or more)")
    return value


AddParser = Callable[..., argparse.ArgumentParser]
"""`add_parser` of the subcommands' action."""
Adder = Callable[[AddParser, argparse.ArgumentParser], None]
"""Adds one subcommand with its arguments."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `tether` parser; a parsed command carries `handler`, its command's name.

    With `argv`, only the subcommand it names gets its parser (building every one costs more
    than the rest of a `tether run` before its turn starts); every subcommand does when `argv`
    names none of them, so that the help and the error for an unknown command list them all."""
    # Accepted before or after the subcommand; SUPPRESS keeps the subcommand's parser from
    # overwriting a value given before it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--workspace",
        "-w",
        default=argparse.SUPPRESS,
        help="project folder (default: the git root above the current one)",
    )
    parser = _TopParser(
        prog="tether", description="A coding agent in a per-workspace daemon.", parents=[common]
    )
    parser.given = sys.argv[1:] if argv is None else argv
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
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    wanted = None if argv is None else command_word(argv)
    for name, add in COMMANDS.items():
        if wanted is None or name == wanted:
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


Arguments = Callable[[argparse.ArgumentParser], None]
"""Adds a subcommand's own arguments to its parser."""

SESSION_OR_LATEST = "session id or prefix (default: latest)"
JSON_HELP = "print the result as JSON on one line, for programs"
VERBOSE_HELP = "keep all of a command's output on screen (default: its last lines)"
MODES_HELP = "ask: edits and commands ask; edits: commands ask; auto: nothing asks"


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def _command(
    name: str,
    handler: str,
    help_text: str,
    arguments: Arguments = _no_arguments,
    *,
    description: str | None = None,
    session: str | None = None,
    json: bool = False,
    common: bool = True,
    epilog: str | None = None,
) -> Adder:
    """The subcommand `name`, run by `handler`: the `common` options (unless false), the
    optional positional `session` (its help, when given), then its own `arguments`, then
    `--json` (when true; a command that places it elsewhere adds it itself). Its description
    is `description`, else `help_text` as a sentence; `epilog` follows the options, its lines
    kept as written."""

    def add(add_parser: AddParser, common_options: argparse.ArgumentParser) -> None:
        parser = add_parser(
            name,
            parents=[common_options] if common else [],
            help=help_text,
            description=description or f"{help_text[:1].upper()}{help_text[1:]}.",
            epilog=epilog,
            formatter_class=_EpilogFormatter if epilog else _Formatter,
        )
        if session is not None:
            parser.add_argument("session", nargs="?", help=session)
        arguments(parser)
        if json:
            parser.add_argument("--json", action="store_true", help=JSON_HELP)
        parser.set_defaults(handler=handler)

    return add


QUIET_HELP = "do not ring the terminal's bell when an approval waits for you"


def _run_arguments(run: argparse.ArgumentParser) -> None:
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
    run.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)
    run.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help=VERBOSE_HELP + "; say which environment the turn's commands run in",
    )
    run.add_argument(
        "--permission-mode",
        choices=["ask", "edits", "auto"],
        default=None,
        help=MODES_HELP,
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
    run.add_argument(
        "--max-input",
        type=_tokens,
        default=None,
        metavar="TOKENS",
        help="let the prompt take up to TOKENS tokens (estimated from its length); a longer one"
        " is refused before anything is sent (default: half of what the model's context window"
        " leaves for the prompt)",
    )
    run.add_argument(
        "--worktree",
        nargs="?",
        const="",
        default=None,
        metavar="NAME",
        help="a new session working in a git worktree of its own on the branch"
        " tether/NAME-<id> (NAME: its title), leaving this checkout alone until `tether merge`",
    )
    run.add_argument(
        "--from",
        dest="from_ref",
        default=None,
        metavar="REF",
        help="with --worktree: the commit, branch or tag it starts from (default: HEAD)",
    )


def usage_error(args: argparse.Namespace) -> str | None:
    """What makes parsed `args` a usage error argparse cannot see (options that do not go
    together), for `main` to refuse before anything runs: before a daemon is started for
    the command."""
    if args.handler == "turns.cmd_run":
        if (args.session or args.continue_latest) and args.worktree is not None:
            return "--worktree makes a new session; it does not go with -s or -c"
        if args.from_ref is not None and args.worktree is None:
            return "--from goes with --worktree"
    search: str | None = getattr(args, "search", None)
    if args.handler == "sessions.cmd_sessions" and search is not None and not search.strip():
        return "--search needs some text to look for"
    return None


MODEL_SETTINGS = """\
the model server, from this shell's environment (sent with each command) or the config file:
  TETHER_BASE_URL   an OpenAI-compatible server's URL (http://127.0.0.1:8000/v1)
  TETHER_MODEL      the model to call (--model chooses one for the session)
  TETHER_API_KEY    its key (OPENAI_API_KEY when unset; ANTHROPIC_API_KEY for Anthropic)
  TETHER_PROVIDER   openai (default) or anthropic
  ~/.config/tether/config.toml   the same under [provider], and permissions, hooks, …
`tether doctor` checks them; `tether daemon status` shows the ones in effect."""

_run = _command(
    "run",
    "turns.cmd_run",
    "run the agent on a prompt",
    _run_arguments,
    description="Run the agent on a prompt. Without a prompt argument, the prompt is read\n"
    "from stdin when stdin is not a terminal; with one, piped stdin is attached to the\n"
    "message as context (`cat build.log | tether run 'why does this fail?'`).",
    epilog=MODEL_SETTINGS,
)
_approvals = _command(
    "approvals", "approvals.cmd_approvals", "list the workspace's pending approvals", json=True
)
_models = _command(
    "models", "models.cmd_models", "the models the model server offers (* = in use)", json=True
)
_skills = _command(
    "skills",
    "skills.cmd_skills",
    "the skills the agent can load, and the invalid ones",
    json=True,
)
_hooks = _command(
    "hooks", "hooks.cmd_hooks", "the hooks your config runs at tool calls and turns", json=True
)


def _chat_arguments(chat: argparse.ArgumentParser) -> None:
    which = chat.add_mutually_exclusive_group()
    which.add_argument("--session", "-s", help="attach to this session (id or prefix)")
    which.add_argument(
        "--continue", "-c", dest="resume", action="store_true", help="the latest session"
    )
    chat.add_argument(
        "--permission-mode", choices=["ask", "edits", "auto"], default=None, help=MODES_HELP
    )
    chat.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)


_chat = _command(
    "chat", "chat.cmd_chat", "an interactive session (also `tether` alone)", _chat_arguments
)


def _answer_arguments(*, always: bool) -> Arguments:
    def add(answer: argparse.ArgumentParser) -> None:
        answer.add_argument(
            "session",
            nargs="?",
            help="session id or prefix (default: the workspace's only pending approval; on a"
            " terminal, asks which when there are several)",
        )
        answer.add_argument("approval", nargs="?", help="approval id or prefix")
        answer.add_argument("--message", "-m", default="", help="told to the model")
        if always:
            answer.add_argument(
                "--always", action="store_true", help="also allow such calls for the session"
            )

    return add


_approve, _deny = (
    _command(
        verb,
        "approvals.cmd_answer",
        f"{verb} a pending approval from any terminal",
        _answer_arguments(always=verb == "approve"),
    )
    for verb in ("approve", "deny")
)


def _attach_arguments(attach: argparse.ArgumentParser) -> None:
    attach.add_argument("--verbose", "-v", action="store_true", help=VERBOSE_HELP)
    attach.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)


_attach = _command(
    "attach",
    "turns.cmd_attach",
    "catch up with a session, follow it",
    _attach_arguments,
    session=SESSION_OR_LATEST,
    json=True,
)


def _sessions_arguments(sessions: argparse.ArgumentParser) -> None:
    sessions.add_argument("--json", action="store_true", help=JSON_HELP)
    sessions.add_argument(
        "--delete",
        metavar="ID",
        help="delete a session (id or unique prefix) with its history and undo snapshots",
    )
    sessions.add_argument(
        "--force",
        action="store_true",
        help="with --delete: also when its worktree holds changes not merged (they are lost)",
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


_sessions = _command(
    "sessions", "sessions.cmd_sessions", "list (or delete) sessions", _sessions_arguments
)


def _fork_arguments(fork: argparse.ArgumentParser) -> None:
    fork.add_argument("--turn", help="the last turn to keep (default: every completed turn)")
    fork.add_argument("--title", help="the fork's title (default: the source's, with (fork))")


def _diff_arguments(diff: argparse.ArgumentParser) -> None:
    diff.add_argument("--stat", action="store_true", help="lines added and removed per file")


_diff = _command(
    "diff",
    "worktrees.cmd_diff",
    "a worktree session's changes against where it started, committed or not",
    _diff_arguments,
    session=SESSION_OR_LATEST,
    json=True,
)


def _merge_arguments(merge: argparse.ArgumentParser) -> None:
    merge.add_argument("--squash", action="store_true", help="one plain commit, no merge commit")


_merge = _command(
    "merge",
    "worktrees.cmd_merge",
    "bring a worktree session's changes into this checkout's branch",
    _merge_arguments,
    session=SESSION_OR_LATEST,
    json=True,
    description="Merge a worktree session's changes (committed or not) into the current"
    " branch of the workspace's checkout. When they conflict, nothing is changed and the"
    " conflicting files are named.",
)


def _worktrees_arguments(worktrees: argparse.ArgumentParser) -> None:
    worktrees.add_argument(
        "--prune",
        action="store_true",
        help="remove the worktrees that are merged or changed nothing (the sessions stay)",
    )


_worktrees = _command(
    "worktrees",
    "worktrees.cmd_worktrees",
    "the worktree sessions' worktrees: merged or not, age, branch, folder",
    _worktrees_arguments,
    json=True,
)


_fork = _command(
    "fork",
    "fork.cmd_fork",
    "a new session with a session's conversation up to a turn (files are not copied)",
    _fork_arguments,
    session=SESSION_OR_LATEST,
    json=True,
)


def _rename_arguments(rename: argparse.ArgumentParser) -> None:
    rename.add_argument("session", help="session id or prefix")
    rename.add_argument(
        "title", nargs="*", help="the title (none: back to the first line of its first message)"
    )


_rename = _command(
    "rename", "rename.cmd_rename", "give a session a title", _rename_arguments, json=True
)


def _export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument(
        "--format",
        choices=["md", "json"],
        default="md",
        help="md: a readable transcript (default); json: every event, one JSON object a line",
    )
    export.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: stdout)")


_export = _command(
    "export",
    "export.cmd_export",
    "a session as a Markdown transcript or its event log",
    _export_arguments,
    session=SESSION_OR_LATEST,
)


def _undo_arguments(undo: argparse.ArgumentParser) -> None:
    undo.add_argument("--turn", help="the turn (default: the latest that changed files)")
    undo.add_argument("--force", action="store_true", help="also overwrite files changed since")


_undo = _command(
    "undo",
    "sessions.cmd_undo",
    "restore the files a turn changed",
    _undo_arguments,
    session=SESSION_OR_LATEST,
    json=True,
)
_compact = _command(
    "compact",
    "sessions.cmd_compact",
    "summarise a session's older history now",
    session=SESSION_OR_LATEST,
)


def _processes_arguments(processes: argparse.ArgumentParser) -> None:
    processes.add_argument("--kill", metavar="ID", help="stop one (its whole process tree)")
    processes.add_argument(
        "--output", metavar="ID", help="the end of what one printed (the model's reads aside)"
    )


_processes = _command(
    "processes",
    "processes.cmd_processes",
    "background processes the daemon owns",
    _processes_arguments,
    json=True,
)


def _mcp_arguments(mcp: argparse.ArgumentParser) -> None:
    mcp.add_argument(
        "action", nargs="?", choices=["approve"], help="approve: let a workspace's server run"
    )
    mcp.add_argument("name", nargs="?", help="the server to approve")


_mcp = _command(
    "mcp",
    "mcp.cmd_mcp",
    "the MCP servers: state, revision, tools",
    _mcp_arguments,
    json=True,
)


def _trust_arguments(trust: argparse.ArgumentParser) -> None:
    trust.add_argument("--revoke", action="store_true", help="trust the workspace no more")
    trust.add_argument("--status", action="store_true", help="only say whether it is trusted")


_trust = _command(
    "trust",
    "trust.cmd_trust",
    "trust the workspace: its language servers may run its own programs",
    _trust_arguments,
    json=True,
    description="Until you trust a workspace, tether runs nothing that lives in it: language"
    " servers run restricted (your own TypeScript, tether's Python instead of the workspace's"
    " node_modules/typescript and .venv), workspace skills ask first. Trusting it also trusts"
    " its skills; its MCP servers keep their own approval (tether mcp approve). Remembered"
    " for you, never in the workspace.",
)
_cancel = _command(
    "cancel",
    "turns.cmd_cancel",
    "cancel a session's running turn",
    session=SESSION_OR_LATEST,
)


def _daemon_arguments(daemon: argparse.ArgumentParser) -> None:
    daemon.add_argument(
        "action",
        choices=["start", "stop", "restart", "status", "ensure", "logs"],
        help="status: what it serves and the settings in effect; ensure: start one unless"
        " one runs; logs: its log (-f follows it)",
    )
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


_daemon = _command(
    "daemon",
    "daemon.cmd_daemon",
    "start, stop or inspect the daemon, or read its log",
    _daemon_arguments,
    description="`logs` reads the daemon's log files (the daemon need not run); see"
    " docs/logs.md. `ensure` starts it unless one runs and prints its discovery record"
    " (token included) as JSON: what `tether --remote` runs on the remote machine.",
)
_doctor = _command(
    "doctor",
    "daemon.cmd_doctor",
    "check the workspace's session database (read-only) and say how to recover",
)
_demo = _command(
    "demo",
    "scripted_model.cmd_demo",
    "see tether work end to end, with a scripted model",
    json=True,
    common=False,
)
_bridge = _command(
    "bridge",
    "bridge.cmd_bridge",
    "relay JSON-RPC lines on stdin/stdout to the daemon (for editors)",
    description="Relay newline-delimited JSON-RPC between stdin/stdout and the workspace's"
    " daemon, starting it when none runs; exits 0 when stdin closes. See docs/bridge.md.",
)


def _dev(add_parser: AddParser, common: argparse.ArgumentParser) -> None:
    dev = add_parser(
        "dev", help="tools for plugin authors", description="Tools for plugin authors."
    )
    dev_sub = dev.add_subparsers(dest="dev_command", required=True, parser_class=_Parser)
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


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


def _web_arguments(web: argparse.ArgumentParser) -> None:
    web.add_argument(
        "--port", type=_port, default=8737, help="the port (default 8737; 0: any free one)"
    )
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on (default 127.0.0.1; another needs --certfile/--keyfile)",
    )
    web.add_argument("--open", action="store_true", help="open the page in your browser")
    web.add_argument(
        "--new-token",
        action="store_true",
        help="a new token and cookie: signs every browser out (they are kept across restarts"
        " on the same port otherwise)",
    )
    web.add_argument("--certfile", metavar="FILE", help="serve https with this certificate")
    web.add_argument("--keyfile", metavar="FILE", help="the certificate's private key")


_web = _command(
    "web",
    "web.cmd_web",
    "every workspace's sessions in a browser",
    _web_arguments,
    common=False,
    description="Serve a page showing every workspace of yours on this machine, its sessions"
    " live, until Ctrl-C. Prints the URL to open; its token signs a browser in. See"
    " docs/web.md for reaching it from another device.",
)
_acp = _command(
    "acp",
    "acp.cmd_acp",
    "be an Agent Client Protocol agent on stdin/stdout (for Zed, JetBrains, ...)",
    description="Speak the Agent Client Protocol (v1) on stdin/stdout, for an editor that"
    " starts tether as its agent. Each session lives in the daemon of the workspace its"
    " cwd is in; --workspace is where `session/list` looks when the editor names no cwd."
    " See docs/acp.md.",
)


COMMANDS: dict[str, Adder] = {
    "run": _run,
    "approvals": _approvals,
    "chat": _chat,
    "approve": _approve,
    "deny": _deny,
    "attach": _attach,
    "sessions": _sessions,
    "fork": _fork,
    "diff": _diff,
    "merge": _merge,
    "worktrees": _worktrees,
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
    "trust": _trust,
    "doctor": _doctor,
    "demo": _demo,
    "bridge": _bridge,
    "dev": _dev,
    "acp": _acp,
    "web": _web,
}
"""Every subcommand, in the order the help lists them."""
