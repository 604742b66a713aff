"""The daemon's claim on its workspace: the lock that keeps it single, and the discovery file
that tells clients where it listens.

The lock is an `flock` on a file in the runtime dir, held for the daemon's lifetime and
released by the kernel if the process dies, so a crashed daemon never blocks the next one.
The discovery file is written atomically with owner-only permissions (it holds the token) once
the daemon accepts connections, and removed on exit.
"""

import fcntl
import os
from pathlib import Path

import msgspec

from tether.protocol.discovery import DiscoveryInfo


class AlreadyRunning(Exception):
    """Another daemon holds the workspace's lock."""


class WorkspaceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise AlreadyRunning(str(self.path)) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_discovery(path: Path, info: DiscoveryInfo) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(info))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_discovery(path: Path, pid: int) -> None:
    """Remove the discovery file if it is still ours."""
    try:
        info = msgspec.json.decode(path.read_bytes(), type=DiscoveryInfo)
    except (OSError, msgspec.DecodeError):
        return
    if info.pid == pid:
        path.unlink(missing_ok=True)
