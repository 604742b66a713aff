"""Finding (and, when needed, starting) the daemon that serves a workspace.

The workspace is `--workspace DIR`, else the git root above the current directory, else the
current directory. Whether a daemon lives is decided by the workspace lock, never by a pid: a
daemon holds an `flock` on the lock file for its whole life and the kernel drops it when the
process dies (a zombie or a reused pid changes nothing). `probe_lock` tries a non-blocking
shared `flock`: if it is granted, no daemon runs and any discovery file is stale.

The lock is in the workspace's data folder, which every shell of the user computes alike; the
discovery file is in the runtime dir, which depends on the shell's environment. So the
discovery file read is the one the holder's record names (`discovery_file`), and only before
it has named one this client's own runtime dir's: a client started with another
`XDG_RUNTIME_DIR` than the daemon finds that daemon, rather than starting a second one.

`locate` acts on what it sees, until `START_TIMEOUT`:

    lock free                       start a daemon (if allowed); a rival start exits 3 and is
                                    harmless, the lock admits one
    held, starting or serving,      connect with it
      discovery file names holder
    held, starting, no file yet     wait, but only while the holder is younger than
                                    START_TIMEOUT; an older one is stuck: say so (pid, log)
    held, serving, no file          the daemon puts it back within DISCOVERY_CHECK_INTERVAL;
                                    wait that long (with margin), then say what is wrong
    held, stopping                  wait for the lock to be released, then start one
    held, record unreadable         (caught mid-write) trust a discovery file if there is one,
                                    else wait briefly

A discovery file naming another pid than the lock's holder is a dead daemon's and is ignored.
A daemon of an earlier tether, which locked a file in the runtime dir instead, is found there
when the workspace's lock is free (`probe_workspace`).

A workspace that `reach_remotely` registered is another machine's (`tether --remote`):
`locate` asks its `RemoteLocator`, and nothing looks for or starts a daemon of that path here.

`start_early` spawns the daemon without waiting for it, so that a command can go on with its
own start (its imports) while the daemon starts on the other core; the `locate` that follows
waits for that daemon instead of spawning another.
"""

import fcntl
import os
import sys
import time
from pathlib import Path

from tether.protocol.places import (
    discovery_path,
    former_lock_path,
    lock_path,
    log_path,
    stderr_path,
)
from tether.protocol.workspace_files import DISCOVERY_CHECK_INTERVAL, discovery_name

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    # Spawning is imported only by a client that starts a daemon; msgspec (with the Structs
    # of the files) only once there is a file to read, so that a client that finds no daemon
    # spawns one before its heavier imports.
    import subprocess
    from typing import Protocol

    from tether.clients.core.websocket import WebSocket
    from tether.protocol.discovery import DiscoveryInfo, LockRecord

START_TIMEOUT = 15.0
POLL_INTERVAL = 0.005
"""Seconds between two looks at the lock and the discovery file while a daemon starts."""
REWRITE_GRACE = 3 * DISCOVERY_CHECK_INTERVAL
"""How long a serving daemon may go without a discovery file before clients give up on it."""
EXIT_ALREADY_RUNNING = 3
"""The daemon's exit code when another one holds the lock (see `tether.daemon.__main__`)."""


class DaemonUnavailable(Exception):
    """No daemon answers and none could be started; the message says why. `holder` is the lock
    record of a daemon that holds the workspace but does not serve it, when that is the cause."""

    def __init__(self, message: str, holder: "LockRecord | None" = None) -> None:
        super().__init__(message)
        self.holder = holder


class NotRunning(DaemonUnavailable):
    """No daemon holds the workspace (and this client was not to start one)."""


class Held:
    """The lock is held. `record` is None when it could not be read (caught mid-write)."""

    __slots__ = ("record",)

    def __init__(self, record: "LockRecord | None") -> None:
        self.record = record

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Held) and other.record == self.record

    def __hash__(self) -> int:
        return hash(self.record)

    def __repr__(self) -> str:
        return f"Held({self.record!r})"


class Located:
    """The daemon found: its discovery info, whether this call started it, and the discovery
    file read (None for a daemon on another machine)."""

    __slots__ = ("info", "path", "started")

    def __init__(self, info: "DiscoveryInfo", started: bool, path: Path | None = None) -> None:
        self.info = info
        self.started = started
        self.path = path


if TYPE_CHECKING:

    class RemoteLocator(Protocol):
        """A daemon on another machine that a workspace path names
        (`tether.clients.core.remote`)."""

        def locate(self, *, autostart: bool) -> Located:
            """What `locate` answers for the workspace; raises as `locate` does."""
            ...

        def discovery(self) -> bytes | None:
            """Its discovery record as a file would hold it, when it is known to serve."""
            ...


_remote: "dict[Path, RemoteLocator]" = {}
"""Workspaces whose daemon is elsewhere, for this process's life (`reach_remotely`)."""


def reach_remotely(workspace: Path, locator: "RemoteLocator") -> None:
    """From now on `workspace` names the daemon `locator` reaches, not a local one: `locate`
    asks it, and nothing looks for (or starts) a daemon of that path on this machine."""
    _remote[workspace] = locator


def forget_remote(workspace: Path) -> None:
    """Undo `reach_remotely` (its locator closed)."""
    _remote.pop(workspace, None)


def remote_locator(workspace: Path) -> "RemoteLocator | None":
    return _remote.get(workspace)


def find_workspace(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def held_lock_record(path: Path) -> bytes | None:
    """What the holder of the lock file at `path` recorded in it (possibly nothing yet: b""),
    or None when no process holds it (no daemon runs). Holds a shared lock for an instant when
    the lock is free. Standard library only: the CLI asks before it imports msgspec."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return os.pread(fd, 4096, 0)
            except OSError:
                return b""
        return None  # closing the descriptor releases the shared lock
    finally:
        os.close(fd)


def probe_lock(path: Path) -> Held | None:
    """None when no process holds the lock file at `path` (no daemon runs), else what its
    holder recorded."""
    raw = held_lock_record(path)
    return None if raw is None else Held(_decode_record(raw))


def held_workspace_record(workspace: Path) -> bytes | None:
    """`held_lock_record` of the workspace's lock or, when that is free, of the lock a daemon
    of an earlier tether holds (see `places.former_lock_path`). Standard library only."""
    raw = held_lock_record(lock_path(workspace))
    return held_lock_record(former_lock_path(workspace)) if raw is None else raw


def probe_workspace(workspace: Path) -> Held | None:
    """None when no daemon holds `workspace`, else what its holder recorded."""
    raw = held_workspace_record(workspace)
    return None if raw is None else Held(_decode_record(raw))


def _decode_record(raw: bytes) -> "LockRecord | None":
    import msgspec

    from tether.protocol.discovery import LockRecord

    try:
        return msgspec.json.decode(raw, type=LockRecord)
    except msgspec.DecodeError:
        return None


def discovery_file(workspace: Path, recorded: str = "") -> Path:
    """The discovery file of the daemon whose lock record says it is at `recorded`: there,
    else (the daemon has not written it yet, or none holds the lock) where this process's
    runtime dir puts it. A recorded path that is not an absolute path to a file of this
    workspace's name is not followed. Standard library only (the CLI's fast path uses it)."""
    if recorded:
        named = Path(recorded)
        if named.is_absolute() and named.name == discovery_name(str(workspace)):
            return named
    return discovery_path(workspace)


def read_discovery_file(
    workspace: Path, record: "LockRecord | None" = None
) -> "DiscoveryInfo | None":
    """The contents of the discovery file that `record` (the lock's) names, see
    `discovery_file`, or None; whether it is current is for the lock to say."""
    import msgspec

    from tether.protocol.discovery import DiscoveryInfo

    try:
        raw = discovery_file(workspace, "" if record is None else record.discovery).read_bytes()
        return msgspec.json.decode(raw, type=DiscoveryInfo)
    except (OSError, msgspec.DecodeError):
        return None


def assess(
    held: Held, info: "DiscoveryInfo | None", *, now: float, waited: float
) -> "DiscoveryInfo | str | None":
    """What to do about a held lock: the discovery info to connect with, None to keep waiting,
    or (a str) why waiting any longer is pointless. `now` is Unix time; `waited` is how long
    this client has been looking."""
    record = held.record
    if record is None:
        if info is not None:
            return info  # a failed connection sends the caller round again
        return None if waited < REWRITE_GRACE else "holds the workspace lock but records nothing"
    if record.state == "stopping":
        return None
    if info is not None and info.pid == record.pid:
        return info
    if record.state == "serving":
        if waited < REWRITE_GRACE:
            return None
        return "is serving but its discovery file is missing or names another process"
    age = now - record.started_at
    if age < START_TIMEOUT:
        return None
    return f"has been starting for {age:.0f} s without serving"


_early: dict[Path, "subprocess.Popen[bytes]"] = {}
"""Daemons `start_early` spawned, by workspace, until a `locate` takes them over."""
_spawned: list["subprocess.Popen[bytes]"] = []
"""Every daemon this process spawned: a daemon outlives the client that started it, and a
dropped handle of a running child would be reported as a leak when collected."""


def reap_spawned() -> None:
    """Collect the exit status of the daemons this process spawned that have exited, so that a
    long-lived client (`tether web`) leaves no zombie behind each daemon it started."""
    for child in list(_spawned):
        child.poll()


def start_early(
    workspace: Path, *, idle_timeout: float | None = None, env: dict[str, str] | None = None
) -> None:
    """Spawn the workspace's daemon now when no process holds its lock, and return at once;
    the next `locate` of `workspace` waits for it. Does nothing when one holds the lock."""
    if workspace in _early or workspace in _remote:
        return
    if held_workspace_record(workspace) is not None:
        return
    _early[workspace] = _spawn(workspace, stderr_path(workspace), idle_timeout, env)


def locate(
    workspace: Path,
    *,
    autostart: bool = True,
    idle_timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> Located:
    """The discovery info of the daemon that serves `workspace`, starting one when none runs
    and `autostart` allows. Raises `NotRunning` (none runs, none to start) or
    `DaemonUnavailable` (one holds the workspace but does not serve it, or a start failed)."""
    remote = _remote.get(workspace)
    if remote is not None:
        return remote.locate(autostart=autostart)
    log = stderr_path(workspace)
    began = time.monotonic()
    child = _early.pop(workspace, None)
    while True:
        waited = time.monotonic() - began
        held = probe_workspace(workspace)
        if held is None:
            if not autostart and child is None:
                raise NotRunning(f"no daemon is running for {workspace}")
            code = None if child is None else child.poll()
            if code is not None and code != EXIT_ALREADY_RUNNING:
                said, own = _daemon_said(log)
                # A refusal of its own names the file and what to fix: the log adds nothing.
                raise DaemonUnavailable(
                    f"the daemon for {workspace} exited with code {code}"
                    + (f": {said}" if said else "")
                    + ("" if own else f"; see {log}")
                )
            if child is None or code is not None:
                # None started yet, or ours lost a race to a daemon that has stopped since.
                child = _spawn(workspace, log, idle_timeout, env)
        else:
            info = read_discovery_file(workspace, held.record)
            verdict = assess(held, info, now=time.time(), waited=waited)
            if verdict is not None and not isinstance(verdict, str):
                started = child is not None and child.pid == verdict.pid
                recorded = "" if held.record is None else held.record.discovery
                return Located(verdict, started, discovery_file(workspace, recorded))
            if isinstance(verdict, str):
                raise DaemonUnavailable(_holder_message(workspace, held, verdict), held.record)
        if waited > START_TIMEOUT:
            if held is not None:
                reason = f"did not serve within {START_TIMEOUT:g} s"
                raise DaemonUnavailable(_holder_message(workspace, held, reason), held.record)
            raise DaemonUnavailable(
                f"the daemon for {workspace} did not start in time; see {log}"
                f" and {log_path(workspace)}"
            )
        time.sleep(POLL_INTERVAL)


def connect(
    workspace: Path, *, autostart: bool = True, idle_timeout: float | None = None
) -> tuple["WebSocket", Located]:
    """A websocket to the daemon `locate` finds for `workspace` (starting one as it allows),
    looking again while the one found does not accept connections, until `START_TIMEOUT`.
    Raises as `locate` does, and `DaemonUnavailable` when the daemon refuses the handshake
    or none accepts in time."""
    from tether.clients.core.websocket import HandshakeClosed, HandshakeRejected, WebSocket
    from tether.protocol.transport import HOST

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        found = locate(workspace, autostart=autostart, idle_timeout=idle_timeout)
        try:
            ws = WebSocket.connect(
                HOST, found.info.port, headers={"Authorization": f"Bearer {found.info.token}"}
            )
        except HandshakeRejected as exc:
            raise DaemonUnavailable(f"the daemon refused the connection: {exc}") from exc
        except (OSError, HandshakeClosed) as exc:
            # The daemon was stopping, or the file was a dead one's read in the instant a new
            # daemon took the lock, or (remote) the forward's far end had gone: look again.
            if time.monotonic() >= deadline:
                raise DaemonUnavailable(
                    f"the daemon for {workspace} (pid {found.info.pid}) did not accept a"
                    f" connection: {exc}; {log_hint(workspace)}"
                ) from exc
            time.sleep(0.05)
            continue
        return ws, found


def wait_until_stopped(workspace: Path, timeout: float = START_TIMEOUT) -> bool:
    """Wait until no daemon holds `workspace`; whether that happened within `timeout`."""
    deadline = time.monotonic() + timeout
    while probe_workspace(workspace) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def log_hint(workspace: Path) -> str:
    """Where to read the log of the workspace's daemon, for an error message: its file here,
    or, for a daemon on another machine, the command that reads it there."""
    if workspace in _remote:
        return "see its log on that machine: `tether --remote HOST:PATH daemon logs`"
    return f"see {log_path(workspace)}"


def _holder_message(workspace: Path, held: Held, reason: str) -> str:
    who = "pid unknown" if held.record is None else f"pid {held.record.pid}"
    return f"the daemon for {workspace} ({who}) {reason}; {log_hint(workspace)}"


def _spawn(
    workspace: Path, log: Path, idle_timeout: float | None, env: dict[str, str] | None
) -> "subprocess.Popen[bytes]":
    import subprocess

    # -P: run in the workspace, `-m` would put it first on the module path, and a `tether`
    # package there would be imported instead of this one (tests/unit/test_spawn_sites.py).
    args = [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)]
    if idle_timeout is not None:
        args += ["--idle-timeout", str(idle_timeout)]
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _keep_small(log)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open(fd, "ab") as out:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd=workspace,
            env=env,
        )
    _spawned.append(child)
    return child


STDERR_KEEP_BYTES = 1024 * 1024
"""A daemon's stderr file past this size is moved to `NAME.1` (replacing it) at a spawn."""


def _keep_small(stderr: Path) -> None:
    # Appended to by every daemon a client starts; what a crash wrote must survive the
    # next start, but the file must not grow forever.
    try:
        if stderr.stat().st_size > STDERR_KEEP_BYTES:
            stderr.replace(stderr.with_name(stderr.name + ".1"))
    except OSError:
        pass


def _daemon_said(log: Path) -> tuple[str, bool]:
    """What a daemon that failed to start said, and whether it was its own refusal: it says
    why on its stderr (see `stderr_path`), on a line of its own starting `tether daemon:`
    (else its last line is taken, which may be the end of a traceback)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "", False
    lines = [line.strip() for line in lines if line.strip()]
    own = [line for line in lines[-5:] if line.startswith("tether daemon:")]
    return (own or lines or [""])[-1].removeprefix("tether daemon: "), bool(own)


def terminate_holder(workspace: Path, record: "LockRecord") -> None:
    """Send SIGTERM to the daemon holding `workspace`'s lock that `record` describes, for one
    that holds it without serving. The record must read the same a moment later: a dead
    daemon's record, caught in the instant a new daemon took the lock, must not be believed.
    Raises `NotRunning` if the lock was released meanwhile, `DaemonUnavailable` if it changed
    hands."""
    time.sleep(0.1)
    held = probe_workspace(workspace)
    if held is None:
        raise NotRunning(f"no daemon is running for {workspace}")
    if held.record != record:
        raise DaemonUnavailable(f"the daemon for {workspace} changed while being stopped")
    import signal

    os.kill(record.pid, signal.SIGTERM)
