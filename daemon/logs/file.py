"""The log file: lines appended to an owner-only file, rotated by size.

`daemon-KEY.log` is the current file; when a line would take it past `max_bytes` it becomes
`daemon-KEY.log.1` (`.1` becomes `.2`, and so on; the oldest beyond `keep` is deleted) and a new
file is begun. Each line is one `write` on an `O_APPEND` descriptor: nothing waits in a buffer
for a crash to lose, and no line is synced (a page-cache write takes microseconds).
"""

import contextlib
import os
import threading
from pathlib import Path

MAX_BYTES = 10 * 1024 * 1024
KEEP = 3
"""Rotated files kept beside the current one."""


def rotated(path: Path, index: int) -> Path:
    """The `index`th older file of `path` (1: the newest rotated one)."""
    return path.with_name(f"{path.name}.{index}")


class LogFile:
    """An open log file; `write` appends a line, rotating first when it would not fit.
    Thread-safe. Raises OSError only from the constructor (a write that fails is dropped:
    a full disk must not stop the daemon)."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.dropped = 0
        """Lines that could not be written."""
        self._lock = threading.Lock()
        self._closed = False
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        # A file left wider by an older tether (or another umask) is tightened.
        os.fchmod(fd, 0o600)
        return fd

    def write(self, line: bytes) -> None:
        with self._lock:
            try:
                if self._fd < 0:  # closed, or a rotation failed to open the new file
                    if self._closed:
                        return
                    self._fd = self._open()
                    self._size = os.fstat(self._fd).st_size
                if self._size and self._size + len(line) > self.max_bytes:
                    self._rotate()
                os.write(self._fd, line)
                self._size += len(line)
            except OSError:
                self.dropped += 1

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(FileNotFoundError):
            rotated(self.path, self.keep).unlink()
        for index in range(self.keep - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                rotated(self.path, index).rename(rotated(self.path, index + 1))
        # Gone already (someone cleaned up): nothing to keep, the new file begins.
        with contextlib.suppress(FileNotFoundError):
            if self.keep > 0:
                self.path.rename(rotated(self.path, 1))
            else:
                self.path.unlink()
        self._fd = self._open()
        self._size = 0

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
