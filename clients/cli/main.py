"""The `tether` command: a thin client of the workspace daemon.

It imports the protocol and a blocking websocket, never the daemon (it starts the daemon as a
separate process when none is running), so that `tether run` against a warm daemon costs little
more than a Python start. This module parses the arguments (`args`), runs the one command they
name (`commands`, loaded on demand) and turns what went wrong into a message and an exit code
(`exit_codes`).

A command that talks to the daemon finds the workspace and, when no daemon holds it, starts one
(once its arguments are known to be usable) before the command's own modules are imported: the
daemon's start, the longest part of a first `tether run`, then overlaps with the rest of the
CLI's.
"""

import argparse
import contextlib
import gc
import sys
from collections.abc import Generator

from tether.clients.cli import commands
from tether.clients.cli.args import VALUED_OPTIONS, build_parser, usage_error
from tether.clients.cli.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    call_error_exit,
)
from tether.clients.core.discovery import DaemonUnavailable, start_early
from tether.protocol.msgspec_import import hide_typing_extensions_from_msgspec

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from typing import NoReturn

TALK_TO_THE_DAEMON = frozenset({"turns", "chat", "approvals", "sessions", "processes", "bridge"})
"""The command modules whose every command connects to the workspace's daemon."""


def _die(message: str, code: int) -> "NoReturn":
    print(f"tether: {message}", file=sys.stderr)
    raise SystemExit(code)


def _start_daemon_early(args: argparse.Namespace) -> None:
    if args.handler.partition(".")[0] not in TALK_TO_THE_DAEMON:
        return
    if args.handler == "chat.cmd_chat" and not sys.stdin.isatty():
        return  # it will only say that it needs a terminal
    if args.handler == "turns.cmd_run" and not args.prompt:
        from tether.clients.cli.piped import stdin_may_hold_text

        if not stdin_may_hold_text():
            return  # no prompt anywhere: the command only says how to give one
    from tether.clients.cli.targets import workspace

    start_early(workspace(args))


def _reader_left() -> bool:
    """Whether stdout's reader left (`tether sessions | head -1`): then the command ends
    quietly, as Unix tools do, whatever failed writing to it (it is not the daemon)."""
    from tether.clients.cli.reader import reader_gone, silence_stdout

    if not reader_gone(sys.stdout):
        return False
    silence_stdout()
    return True


def _interactive(argv: list[str]) -> bool:
    """`tether` alone, or with only `--workspace` or `--remote`: the interactive session
    (`tether chat`)."""
    rest = [a for a in argv if not a.startswith(tuple(f"{o}=" for o in VALUED_OPTIONS))]
    while rest[:1] and rest[0] in VALUED_OPTIONS:
        rest = rest[2:]
    return not rest


@contextlib.contextmanager
def _collector_paused() -> Generator[None]:
    """The garbage collector off while the command starts: what it makes then (its modules
    above all) lives as long as the process, so the collector's passes over it find nothing.
    Afterwards that is frozen (later passes skip it) and the collector runs again."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    hide_typing_extensions_from_msgspec()
    if _interactive(argv):
        argv = [*argv, "chat"]
    try:
        with contextlib.ExitStack() as stack:
            with _collector_paused():
                args = build_parser(argv).parse_args(argv)
                if (refused := usage_error(args)) is not None:
                    raise CliError(refused, EXIT_USAGE)
                if args.remote is not None:
                    from tether.clients.cli.remote import reach

                    done = reach(args, argv, stack)
                    if done is not None:
                        return done
                else:
                    _start_daemon_early(args)
                command = commands.load(args.handler)
            code = int(command(args))
            sys.stdout.flush()  # here, where a reader that left is noticed, not at exit
            return code
    except CliError as exc:
        _die(str(exc), exc.code)
    except DaemonUnavailable as exc:
        _die(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if isinstance(exc, OSError) and _reader_left():
            return EXIT_OK
        # A command that got this far has imported the client; `main` itself does not.
        from tether.clients.core.call_error import CallError
        from tether.clients.core.websocket import WebSocketError

        if isinstance(exc, CallError):
            _die(exc.message, call_error_exit(exc.code))
        if isinstance(exc, WebSocketError | ConnectionError):
            _die(f"lost the connection to the daemon: {exc}", EXIT_USAGE)
        raise


if __name__ == "__main__":
    raise SystemExit(main())
