"""`python -P -m tether.clients.locate --workspace DIR`: the discovery info of the daemon serving
a workspace, starting one when none runs, as one line of JSON on stdout.

For clients in languages that cannot take an `flock` or compute platformdirs' paths (the
TypeScript library): the same `locate` the CLI uses decides, so every client agrees on where
the daemon is and whether it lives. Prints `{"discovery": DiscoveryInfo, "started": bool,
"discoveryFile": path}`; exits 2 when none runs and `--no-start` forbids starting one, 1 when
none could be started or the one holding the workspace does not serve it, the reason on stderr.
"""

import argparse
import sys
from pathlib import Path

import msgspec

from tether.clients.core.discovery import DaemonUnavailable, NotRunning, locate
from tether.protocol.places import discovery_path

EXIT_NOT_RUNNING = 2
EXIT_UNAVAILABLE = 1


class Located(msgspec.Struct, kw_only=True, rename="camel"):
    discovery: object
    started: bool
    discovery_file: str


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -P -m tether.clients.locate", description=__doc__)
    parser.add_argument("--workspace", required=True, help="the workspace (resolved here)")
    parser.add_argument("--no-start", action="store_true", help="do not start a daemon")
    parser.add_argument("--idle-timeout", type=float, default=None, help="for a daemon started")
    args = parser.parse_args(argv)
    workspace = Path(args.workspace).resolve()
    try:
        found = locate(workspace, autostart=not args.no_start, idle_timeout=args.idle_timeout)
    except NotRunning as exc:
        print(exc, file=sys.stderr)
        return EXIT_NOT_RUNNING
    except DaemonUnavailable as exc:
        print(exc, file=sys.stderr)
        return EXIT_UNAVAILABLE
    answer = Located(
        discovery=found.info,
        started=found.started,
        discovery_file=str(found.path or discovery_path(workspace)),
    )
    sys.stdout.buffer.write(msgspec.json.encode(answer) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
