"""A program on a real pseudo-terminal, for tests of the interactive mode: keys go in as the
bytes a terminal sends, and what it draws is read back, escape sequences removed, to be
waited for. Cursor position requests are answered, as a terminal emulator does."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

_FORWARD = re.compile(r"\x1b\[(\d*)C")
_ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07]*\x07"
)

ESC = "\x1b"
CTRL_C = "\x03"
CTRL_D = "\x04"
ENTER = "\r"
TAB = "\t"


class Terminal:
    """`argv` on a pty of `rows` x `columns`, its screen output kept as `text` (escape
    sequences and carriage returns removed)."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path | None = None,
        rows: int = 40,
        columns: int = 120,
    ) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color"},
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self._raw = b""
        self._seen = 0
        """Where the next `expect` starts looking in `text`."""

    @property
    def raw(self) -> str:
        """Everything the program wrote, escape sequences included."""
        return self._raw.decode("utf-8", "replace")

    @property
    def text(self) -> str:
        decoded = self._raw.decode("utf-8", "replace")
        # A renderer may move the cursor forward instead of writing spaces.
        spaced = _FORWARD.sub(lambda m: " " * int(m.group(1) or 1), decoded)
        return _ESCAPES.sub("", spaced).replace("\r", "")

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(timeout, 0))
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the program closed the terminal
            chunk = b""
        if not chunk:
            raise EOFError
        # Answer cursor position requests as a terminal does (always "top left": the
        # prompt then has the rows below it for its menus and status line).
        for _ in range(chunk.count(b"\x1b[6n")):
            os.write(self.master, b"\x1b[1;1R")
        self._raw += chunk
        return True

    def expect(self, wanted: str, timeout: float = 20.0, *, anywhere: bool = False) -> str:
        """Wait until `wanted` appears after what earlier `expect`s matched (`anywhere`: in
        all that was shown); the text up to and including it."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            found = text.find(wanted, 0 if anywhere else self._seen)
            if found >= 0:
                start, self._seen = self._seen, max(self._seen, found + len(wanted))
                return text[start : self._seen]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{wanted!r} not shown within {timeout} s; screen:\n{text}")
            try:
                self._read(remaining)
            except EOFError:
                raise AssertionError(
                    f"the program ended before showing {wanted!r}:\n{text}"
                ) from None

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, once the program has ended (reading what it still draws)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                self._read(0.05)
            except EOFError:
                break
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.master)
