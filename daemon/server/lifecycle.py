"""The daemon's claim on its workspace: the lock that keeps it single and proves it alive, and
the discovery file that tells clients where it listens.

The lock is an `flock` on a file in the runtime dir, held for the daemon's lifetime and
released by the kernel the moment the process dies, so a crashed daemon never blocks the next
one. The holder keeps a `LockRecord` (pid, starting/serving/stopping, start time) in the file;
clients probe the lock to learn whether a daemon lives and read the record to learn which one
and what it is doing. The discovery file is written atomically with owner-only permissions (it
holds the token) once the daemon accepts connections, put back if it goes missing while the
daemon serves, and removed on exit.
"""

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
    """Another daemon holds the workspace's lock."""


class WorkspaceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.started_at = 0.0
        self._fd: int | None = None

    def acquire(
        self, *, patience: float = ACQUIRE_PATIENCE, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        """Take the lock and record this process as `starting`; `AlreadyRunning` if another
        process still holds it after `patience` seconds."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise AlreadyRunning(str(self.path)) from exc
                sleep(0.01)
        self._fd = fd
        self.started_at = time.time()
        self.record("starting")

    def record(self, state: LockState) -> None:
        """Tell clients what this daemon is doing (a no-op unless the lock is held)."""
        if self._fd is None:
            return
        data = msgspec.json.encode(
            LockRecord(pid=os.getpid(), state=state, started_at=self.started_at)
        )
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def release(self) -> None:
        if self._fd is not None:
            # An empty record, not a stale one, is what the next holder's readers see until it
            # writes its own.
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None


def write_discovery(path: Path, info: DiscoveryInfo) -> os.stat_result:
    """Write the file atomically (owner-only); return its stat, to notice later changes."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    path: Path,
    info: DiscoveryInfo,
    *,
    interval: float = DISCOVERY_CHECK_INTERVAL,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Write the discovery file, report started, then every `interval` seconds put it back if
    it is missing or is no longer the file written (deleted, or replaced by a stale one): the
    lock proves this daemon is the live one, so the file must name it. Runs until cancelled."""
    written = write_discovery(path, info)
    task_status.started()
    while True:
        await trio.sleep(interval)
        # A stat on the runtime dir (a tmpfs) every second is too cheap for a thread.
        if not _unchanged(path, written):
            log.warning("the discovery file went missing or was replaced; rewriting it", path=path)
            written = write_discovery(path, info)


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
