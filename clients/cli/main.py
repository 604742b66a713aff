"""The `tether` command: a thin client of the workspace daemon.

It imports the protocol and a blocking websocket, never the daemon (it starts the daemon as a
separate process when none is running), so that `tether run` against a warm daemon costs little
more than a Python start. This module parses the arguments (`args`), runs the one command they
name (`commands`, loaded on demand) and turns what went wrong into a message and an exit code
(`exit_codes`).
"""

import sys
from typing import NoReturn

from tether.clients.cli import commands
from tether.clients.cli.args import build_parser
from tether.clients.cli.exit_codes import EXIT_FAILED, EXIT_USAGE, CliError
from tether.clients.discovery import DaemonUnavailable
from tether.clients.rpc import CallError
from tether.clients.websocket import WebSocketError


def _die(message: str, code: int) -> NoReturn:
    print(f"tether: {message}", file=sys.stderr)
    raise SystemExit(code)


def _interactive(argv: list[str]) -> bool:
    """`tether` alone, or with only `--workspace`: the interactive session (`tether chat`)."""
    rest = [a for a in argv if not a.startswith("--workspace=")]
    while rest[:1] in (["-w"], ["--workspace"]):
        rest = rest[2:]
    return not rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _interactive(argv):
        argv = [*argv, "chat"]
    args = build_parser().parse_args(argv)
    command = commands.load(args.handler)
    try:
        return int(command(args))
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
