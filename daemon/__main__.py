"""`python -P -m tether.daemon --workspace DIR`: run the daemon for one workspace in the
foreground. Clients start it this way (detached, in the workspace) when no daemon answers for
their workspace; `-P` keeps that folder off the module path, where a `tether` package of the
workspace's would otherwise be imported in place of this one.

It refuses to run without `-P` (or `-I`, which implies it), `sys.flags.safe_path`: by then a
workspace's own `tether` package would have been imported in its place, but the refusal makes
a start without it fail loudly everywhere (a new spawn site, a hand-written service file)
rather than run, and keeps the modules the daemon imports later (tools, providers) from being
looked up in the folder it was started in.

Exit codes: 0 after a clean stop, 2 for bad arguments or configuration (an unusable token
file, a fixed port that is taken, no `-P`), 3 when another daemon already serves the workspace (its
discovery file says where), 4 when the daemon's data cannot be used (a damaged or unwritable
session database, one from a newer tether, or a folder it cannot create). Every refusal is one
line on stderr starting `tether daemon:`, naming the path.

SIGTERM before the event loop listens for it (while the arguments, configuration and lock are
handled, well under a second) takes its default action: nothing is written yet, and the kernel
drops the lock. From then on `Daemon.run` turns it into a clean stop.
"""

import gc

# Starting allocates little but what lives as long as the process (modules, classes,
# functions): the collector's passes over it while the daemon imports some 550 modules free
# nothing and cost about a tenth of the start. `main` freezes what the start made (later
# collections skip it) and enables the collector before serving.
gc.disable()

from tether.daemon.lean_imports import skip_httpx_cli
from tether.protocol.msgspec_import import hide_typing_extensions_from_msgspec

skip_httpx_cli()
hide_typing_extensions_from_msgspec()

import argparse
import os
import sys
from pathlib import Path

import trio

from tether.daemon.config import paths
from tether.daemon.config.live import UserSettings
from tether.daemon.config.settings import ConfigError, config_file
from tether.daemon.logs import log
from tether.daemon.logs.file import LogFile
from tether.daemon.procs.groups import KILL_GRACE
from tether.daemon.rpc.outbox import DEFAULT_MAX_BYTES
from tether.daemon.server.lifecycle import AlreadyRunning, WorkspaceLock
from tether.protocol.discovery import DISCOVERY_CHECK_INTERVAL

EXIT_ALREADY_RUNNING = 3
EXIT_DATA_UNUSABLE = 4


def main(argv: list[str] | None = None) -> int:
    if not sys.flags.safe_path:
        print(
            "tether daemon: run it as `python -P -m tether.daemon` (Python's -P, or -I): without"
            " it the folder it starts in, the workspace, comes first on the module path",
            file=sys.stderr,
        )
        return 2
    parser = argparse.ArgumentParser(prog="tether-daemon", description=__doc__)
    parser.add_argument("--workspace", required=True, help="the project folder to serve")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="seconds with no client and no running turn before exiting (0 = never)",
    )
    parser.add_argument(
        "--client-queue-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BYTES,
        help="bytes held for one client (responses, replays, events); a client that lets more"
        " pile up is told to resync or, for responses, disconnected",
    )
    parser.add_argument(
        "--kill-grace",
        type=float,
        default=KILL_GRACE,
        help="seconds a stopped command's processes get between SIGTERM and SIGKILL",
    )
    parser.add_argument(
        "--discovery-check-interval",
        type=float,
        default=DISCOVERY_CHECK_INTERVAL,
        help="seconds between checks that the discovery file is in place (at most the default)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=0,
        help="the loopback port to listen on (default: any free one; a fixed one serves a"
        " forwarded port, as in a container)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="read the clients' token from this file (a mounted secret) instead of making a"
        " new one at each start",
    )
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=list(log.LEVELS),
        default=None,
        help="the log's level (default: log_level in config.toml, TETHER_LOG_LEVEL, info)",
    )
    args = parser.parse_args(argv)
    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        print(f"tether daemon: {workspace} is not a directory", file=sys.stderr)
        return 2
    try:
        token = None if args.token_file is None else read_token(args.token_file)
    except ValueError as exc:
        print(f"tether daemon: {exc}", file=sys.stderr)
        return 2
    if args.token_file is not None:
        from tether.daemon.config.sandbox import hide_daemon_secret

        hide_daemon_secret(args.token_file)
    try:
        settings = UserSettings(config_file(), os.environ)
    except ConfigError as exc:
        print(f"tether daemon: bad config: {exc}", file=sys.stderr)
        return 2
    try:
        for folder in paths.private_dirs():
            paths.private_dir(folder)
    except OSError as exc:
        return _cannot_prepare(exc)
    lock = WorkspaceLock(paths.lock_path(str(workspace)))
    try:
        lock.acquire(former=paths.former_lock_path(str(workspace)))
    except AlreadyRunning as exc:
        print(f"tether daemon: {_already_served(workspace, exc)}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except OSError as exc:
        return _cannot_prepare(exc)
    try:
        # Opened once the lock is ours: only the daemon that serves writes (and rotates) it.
        log_file = LogFile(paths.log_path(str(workspace)))
    except OSError as exc:
        lock.release()
        return _cannot_prepare(exc)
    log.configure(
        log_file,
        level=args.log_level or settings.started.log_level,
        # Run by hand, it shows its log; started by a client, its stderr is a file of its own.
        echo=sys.stderr if sys.stderr.isatty() else None,
    )
    _mask_known_secrets(settings)
    from tether.daemon.server.limits import raise_open_file_limit

    before, now = raise_open_file_limit()
    if now != before:
        _log.info("open-file limit raised", soft_before=before, soft=now)
    try:
        # Imported only by the process that won the lock: a daemon that loses a start race
        # exits without paying for the whole daemon's import.
        from tether.daemon.server.daemon import Daemon, ListenRefused
        from tether.daemon.sessions.schema import StoreOpenError

        daemon = Daemon(
            workspace,
            settings,
            lock=lock,
            idle_timeout=args.idle_timeout,
            client_queue_bytes=args.client_queue_bytes,
            kill_grace=args.kill_grace,
            discovery_interval=args.discovery_check_interval,
            port=args.port,
            token=token,
        )
        gc.freeze()
        gc.enable()
        try:
            trio.run(daemon.run)
        except StoreOpenError as exc:
            _log.error("the store cannot be used", error=str(exc))
            print(f"tether daemon: {exc}", file=sys.stderr)
            return EXIT_DATA_UNUSABLE
        except ListenRefused as exc:
            _log.error("the port cannot be listened on", error=str(exc))
            print(f"tether daemon: {exc}", file=sys.stderr)
            return 2
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt | SystemExit):
                # The traceback goes to stderr as well, where a client that started it looks.
                _log.exception("the daemon crashed", exc=exc)
            raise
    finally:
        lock.release()
        log.close()
    return 0


TOKEN_MIN_LENGTH = 32
"""Characters a token read from a file must have at least: it is the only thing between a
forwarded port and the workspace's shell."""


def read_token(path: Path) -> str:
    """The token in `path` (surrounding whitespace stripped). ValueError naming the path and
    the fault when it is missing, too short or not one line of printable ASCII (it travels in
    an HTTP header)."""
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII"
        raise ValueError(f"cannot read the token file {path}: {reason}") from None
    if len(token) < TOKEN_MIN_LENGTH:
        raise ValueError(
            f"the token in {path} has {len(token)} characters; at least {TOKEN_MIN_LENGTH}"
            " are needed (`openssl rand -hex 32` makes one)"
        )
    if not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError(f"the token in {path} must be one word of printable ASCII")
    return token


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text}")
    return value


_log = log.get_logger(__name__)


def _already_served(workspace: Path, refused: AlreadyRunning) -> str:
    """Which daemon serves `workspace` already, and where it says so: what a user who
    started a second one needs to find (or stop) the first."""
    holder = refused.holder
    if holder is None:
        return f"another daemon already serves {workspace} (its lock: {refused})"
    where = (
        f"its discovery file is {holder.discovery}"
        if holder.discovery
        else f"it is {holder.state} (its lock: {refused})"
    )
    return f"another daemon (pid {holder.pid}) already serves {workspace}; {where}"


def _cannot_prepare(exc: OSError) -> int:
    print(
        f"tether daemon: cannot prepare {exc.filename}: {exc.strerror or exc} (the daemon"
        " keeps its sessions and logs there, owner-only)",
        file=sys.stderr,
    )
    return EXIT_DATA_UNUSABLE


def _mask_known_secrets(settings: UserSettings) -> None:
    """Tell the log's scrubber the secrets known at start: the API key in use and the values
    of the environment variables commands do not get (the token and keys that come later are
    added where they appear)."""
    from tether.daemon.procs.env import is_secret_variable

    log.add_secret(settings.started.provider.api_key)
    for name, value in settings.env.items():
        if is_secret_variable(name, value):
            log.add_secret(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
