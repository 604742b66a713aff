"""The daemon's claim on its workspace: the lock that keeps it single and proves it alive, and
the discovery file that tells clients where it listens.

The lock is an `flock` on a file in the workspace's data folder, beside the database it
guards, held for the daemon's lifetime and released by the kernel the moment the process dies,
so a crashed daemon never blocks the next one. The holder keeps a `LockRecord` (pid,
starting/serving/stopping, start time, where its discovery file is) in the file; clients probe
the lock to learn whether a daemon lives and read the record to learn which one, what it is
doing and where it listens.

The discovery file is written atomically with owner-only permissions (it holds the token) once
the daemon accepts connections, put back if it goes missing while the daemon serves, and
removed on exit. It goes into the runtime dir that `tether.protocol.places.runtime_dir` picks,
asked again at each rewrite: when the folder it was in has gone (`/run/user/UID` removed at
logout), the file moves where the same rule now points, and the lock's record follows it. The
daemon creates only its own `tether` folder there, never the runtime dir itself.
"""

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from tether.daemon.logs.log import get_logger
from tether.protocol.discovery import (
    DISCOVERY_CHECK_INTERVAL,
    DiscoveryInfo,
    LockRecord,
    LockState,
)

log = get_logger(__name__)

ACQUIRE_PATIENCE = 0.25
"""Seconds to keep retrying a contended lock. Clients probe it with a momentary shared
`flock`; a daemon starting at that instant must not mistake the probe for a rival daemon."""


class AlreadyRunning(Exception):
    """Another daemon holds the workspace's lock; `holder` is what it recorded there (None
    when it was caught before its first record, or mid-write)."""

    def __init__(self, path: Path, holder: LockRecord | None) -> None:
        super().__init__(str(path))
        self.holder = holder


class WorkspaceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.started_at = 0.0
        self.discovery: Path | None = None
        """Where the discovery file is, once written (recorded for clients)."""
        self._fd: int | None = None
        self._state: LockState = "starting"

    def acquire(
        self,
        *,
        patience: float = ACQUIRE_PATIENCE,
        sleep: Callable[[float], None] = time.sleep,
        former: Path | None = None,
    ) -> None:
        """Take the lock and record this process as `starting`; `AlreadyRunning` if another
        process still holds it after `patience` seconds, or (the lock released again) if a
        daemon of an earlier tether holds the lock file `former` for the same workspace."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    os.close(fd)
                    raise AlreadyRunning(self.path, holder) from exc
                sleep(0.01)
        self._fd = fd
        if former is not None:
            held, older = _probe(former)
            if held:
                self.release()
                raise AlreadyRunning(former, older)
        self.started_at = time.time()
        self.record("starting")

    def record(self, state: LockState, *, discovery: Path | None = None) -> None:
        """Tell clients what this daemon is doing and, once given, where its discovery file
        is (a no-op unless the lock is held)."""
        if discovery is not None:
            self.discovery = discovery
        self._state = state
        if self._fd is None:
            return
        record = LockRecord(
            pid=os.getpid(),
            state=state,
            started_at=self.started_at,
            discovery="" if self.discovery is None else str(self.discovery),
        )
        data = msgspec.json.encode(record)
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def moved(self, discovery: Path) -> None:
        """Record that the discovery file is now at `discovery`, the state unchanged."""
        self.record(self._state, discovery=discovery)

    def release(self) -> None:
        if self._fd is not None:
            # An empty record, not a stale one, is what the next holder's readers see until it
            # writes its own.
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None


def _probe(path: Path) -> tuple[bool, LockRecord | None]:
    """Whether a process holds the lock file at `path`, and its record when it can be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True, _holder(fd)
    finally:
        os.close(fd)
    return False, None


def _holder(fd: int) -> LockRecord | None:
    try:
        return msgspec.json.decode(os.pread(fd, 4096, 0), type=LockRecord)
    except (OSError, msgspec.DecodeError):
        return None


def write_discovery(path: Path, info: DiscoveryInfo) -> os.stat_result:
    """Write the file atomically (owner-only); return its stat, to notice later changes. Its
    folder is created (0700) when missing, but not the folder above it: a runtime dir that
    has gone is an OSError here, not re-created with whatever mode a `mkdir -p` gives."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(info))
        written = os.fstat(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return written


async def keep_discovery(
    where: Callable[[], Path],
    info: DiscoveryInfo,
    *,
    moved: Callable[[Path], None],
    interval: float = DISCOVERY_CHECK_INTERVAL,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Write the discovery file at `where()`, tell `moved` its path and report started with
    it, then every `interval` seconds put it back if it is missing or is no longer the file
    written (deleted, or replaced by a stale one): the lock proves this daemon is the live
    one, so the file must name it. A rewrite asks `where()` again, and tells `moved` when the
    answer changed; one that fails (no usable runtime dir) is logged and tried again at the
    next check. Runs until cancelled."""
    path = where()
    written = write_discovery(path, info)
    moved(path)
    task_status.started(path)
    while True:
        await trio.sleep(interval)
        # A stat on the runtime dir (a tmpfs) every second is too cheap for a thread.
        if _unchanged(path, written):
            continue
        try:
            now = where()
            written = write_discovery(now, info)
        except OSError as exc:
            log.warning("the discovery file cannot be written", path=path, error=str(exc))
            continue
        log.warning("the discovery file went missing or was replaced; rewrote it", path=now)
        if now != path:
            remove_discovery(path, info.pid)
            path = now
            moved(path)


def _unchanged(path: Path, written: os.stat_result) -> bool:
    try:
        current = path.stat()
    except FileNotFoundError:
        return False
    return _identity(current) == _identity(written)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def remove_discovery(path: Path, pid: int) -> None:
    """Remove the discovery file if it is still ours."""
    try:
        info = msgspec.json.decode(path.read_bytes(), type=DiscoveryInfo)
    except (OSError, msgspec.DecodeError):
        return
    if info.pid == pid:
        path.unlink(missing_ok=True)
