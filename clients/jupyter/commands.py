"""The words of the magics: `%%tether [options]` above a cell, `%tether COMMAND [args]` on a
line. Parsing never prints and never exits the kernel: a bad line raises `Problem` with the
usage in its message."""

import argparse
import shlex
from dataclasses import dataclass
from typing import Literal, NoReturn, cast

from tether.jupyter.actions import Problem
from tether.protocol.events import PermissionMode

USAGE = """\
%%tether [--new] [--session ID] [--mode ask|edits|auto]
    the cell's text is a turn of the notebook's session, shown live below it
%tether attach [SESSION]        show the session's running (else last) turn and follow it
%tether sessions                the workspace's sessions (* marks the notebook's)
%tether cancel [SESSION]        cancel the running turn
%tether approve [--always] [APPROVAL]
%tether deny [--message TEXT] [APPROVAL]
                                answer a pending approval, then follow its turn
A kernel interrupt detaches from a turn and leaves it running."""

Command = Literal["attach", "sessions", "cancel", "approve", "deny", "help"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Problem(f"{message}\n\n{USAGE}")


@dataclass(frozen=True, kw_only=True)
class LineArgs:
    command: Command
    target: str | None = None
    """The session (attach, cancel) or approval (approve, deny) named."""
    always: bool = False
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class CellArgs:
    new: bool = False
    session: str | None = None
    mode: PermissionMode | None = None


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise Problem(f"cannot read {line!r}: {exc}") from exc


def _line_parser() -> _Parser:
    parser = _Parser(prog="%tether", add_help=False)
    commands = parser.add_subparsers(dest="command")
    for name in ("attach", "cancel"):
        commands.add_parser(name, add_help=False).add_argument("target", nargs="?")
    commands.add_parser("sessions", add_help=False)
    commands.add_parser("help", add_help=False)
    approve = commands.add_parser("approve", add_help=False)
    approve.add_argument("--always", action="store_true")
    approve.add_argument("target", nargs="?")
    deny = commands.add_parser("deny", add_help=False)
    deny.add_argument("--message", default="")
    deny.add_argument("target", nargs="?")
    return parser


def parse_line(line: str) -> LineArgs:
    """`%tether`'s line; none (or `help`) is `help`."""
    words = _split(line)
    if not words or words[0] in ("-h", "--help"):
        return LineArgs(command="help")
    args = _line_parser().parse_args(words)
    return LineArgs(
        command=cast(Command, args.command),
        target=getattr(args, "target", None),
        always=getattr(args, "always", False),
        message=getattr(args, "message", ""),
    )


def parse_cell(line: str) -> CellArgs:
    """The options on `%%tether`'s line."""
    parser = _Parser(prog="%%tether", add_help=False)
    parser.add_argument("--new", action="store_true")
    parser.add_argument("--session")
    parser.add_argument("--mode", choices=["ask", "edits", "auto"])
    args = parser.parse_args(_split(line))
    if args.new and args.session:
        raise Problem("--new and --session exclude each other")
    return CellArgs(new=args.new, session=args.session, mode=args.mode)
