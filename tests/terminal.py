"""The `tether` CLI on a real pseudo-terminal, as a person runs it.

The pty's slave end is the process's stdin, stdout and stderr and its controlling terminal
(`setsid --ctty`), in a session of its own, so what the test types goes through the terminal
driver: `\\x03` becomes SIGINT for the CLI (and only the CLI), a line is delivered on Enter, and
input is echoed.
"""

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from types import TracebackType

import pytest

from tests.support import Home


class TerminalCli:
    """One `tether` command on a terminal `columns` wide; read what it shows with `expect`."""

    def __init__(self, home: Home, *args: str, cwd: Path | None = None, columns: int = 240):
        setsid = shutil.which("setsid")
        if setsid is None:
            pytest.skip("setsid (util-linux) is needed to give the CLI a controlling terminal")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        try:
            self.proc = subprocess.Popen(
                # -w: should setsid have to fork, its exit status is still the CLI's.
                [setsid, "-w", "-c", sys.executable, "-m", "tether.clients.cli.main", *args],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=home.env,
                cwd=cwd,
            )
        finally:
            os.close(slave)
        self._master = master
        self._shown = ""
        self._seen = 0
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 4096)
            except OSError:  # EIO: every slave end is closed
                chunk = b""
            with self._changed:
                if not chunk:
                    self._ended = True
                    self._changed.notify_all()
                    return
                self._shown += chunk.decode("utf-8", "replace").replace("\r\n", "\n")
                self._changed.notify_all()

    @property
    def shown(self) -> str:
        """Everything the terminal showed so far (newlines as `\\n`)."""
        with self._changed:
            return self._shown

    def expect(self, text: str, timeout: float = 20.0) -> str:
        """Wait until `text` is shown after what earlier `expect`s matched; return what was
        shown up to the end of it."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: text in self._shown[self._seen :] or self._ended, timeout
            )
            at = self._shown.find(text, self._seen)
            if not found or at < 0:
                raise AssertionError(f"{text!r} not shown; the terminal shows:\n{self._shown}")
            before, self._seen = self._shown[self._seen : at + len(text)], at + len(text)
            return before

    def send(self, text: str) -> None:
        os.write(self._master, text.encode())

    def wait(self, timeout: float = 20.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        os.close(self._master)

    def __enter__(self) -> "TerminalCli":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
