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
from tether.clients.cli.exit_codes import EXIT_USAGE, CliError, call_error_exit
from tether.clients.discovery import DaemonUnavailable
from tether.clients.rpc import CallError
from tether.clients.websocket import WebSocketError


def _die(message: str, code: int) -> NoReturn:
    print(f"tether: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = commands.load(args.handler)
    try:
        return int(command(args))
    except CliError as exc:
        _die(str(exc), exc.code)
    except DaemonUnavailable as exc:
        _die(str(exc), EXIT_USAGE)
    except CallError as exc:
        _die(exc.message, call_error_exit(exc.code))
    except (WebSocketError, ConnectionError) as exc:
        _die(f"lost the connection to the daemon: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
