"""`python -m tether.daemon --workspace DIR`: run the daemon for one workspace in the
foreground. Clients start it this way (detached) when no daemon answers for their workspace.

Exit codes: 0 after a clean stop, 2 for bad arguments or configuration, 3 when another daemon
already serves the workspace (its discovery file says where), 4 when the daemon's data cannot be
used (a damaged or unwritable session database, one from a newer tether, or a folder it cannot
create). Every refusal is one line on stderr starting `tether daemon:`, naming the path.
"""

import argparse
import logging
import os
import sys
from pathlib import Path

import trio

from tether.daemon import paths
from tether.daemon.config import ConfigError, load_config
from tether.daemon.daemon import Daemon
from tether.daemon.lifecycle import AlreadyRunning
from tether.daemon.outbox import DEFAULT_LIMIT
from tether.daemon.store import StoreOpenError
from tether.protocol.discovery import workspace_key

EXIT_ALREADY_RUNNING = 3
EXIT_DATA_UNUSABLE = 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether-daemon", description=__doc__)
    parser.add_argument("--workspace", required=True, help="the project folder to serve")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="seconds with no client and no running turn before exiting (0 = never)",
    )
    parser.add_argument(
        "--client-queue-limit",
        type=int,
        default=DEFAULT_LIMIT,
        help="events queued for one client before it is told to resync",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        print(f"tether daemon: {workspace} is not a directory", file=sys.stderr)
        return 2
    try:
        config = load_config()
    except ConfigError as exc:
        print(f"tether daemon: bad config: {exc}", file=sys.stderr)
        return 2
    try:
        for folder in paths.private_dirs():
            paths.private_dir(folder)
        _setup_logging(str(workspace), args.log_level)
    except OSError as exc:
        print(
            f"tether daemon: cannot prepare {exc.filename}: {exc.strerror or exc} (the daemon"
            " keeps its sessions and logs there, owner-only)",
            file=sys.stderr,
        )
        return EXIT_DATA_UNUSABLE
    daemon = Daemon(
        workspace,
        config,
        idle_timeout=args.idle_timeout,
        client_queue_limit=args.client_queue_limit,
    )
    try:
        daemon.lock.acquire()
    except AlreadyRunning:
        print(f"tether daemon: another daemon already serves {workspace}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    try:
        trio.run(daemon.run)
    except StoreOpenError as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return EXIT_DATA_UNUSABLE
    finally:
        daemon.lock.release()
    return 0


def _setup_logging(workspace: str, level: str) -> None:
    path = paths.log_dir() / f"daemon-{workspace_key(workspace)}.log"
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    paths.tighten(path, 0o600)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.addHandler(logging.StreamHandler())
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("trio-websocket").setLevel(logging.WARNING)


if __name__ == "__main__":
    raise SystemExit(main())
