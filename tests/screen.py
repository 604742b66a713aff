"""Programs on a real pseudo-terminal, for the tests of what the CLI draws.

`PtyProgram` is the one way the tests open a pty, spawn on it and read it: a thread reads all
the program writes, answering cursor position requests as a terminal emulator does when asked
to. `Terminal` is the interactive mode's harness on it: keys go in as the bytes a terminal
sends, and what it draws is read back, escape sequences removed, to be waited for
(`tests.terminal.TerminalCli` is `run` and `attach`'s)."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from collections.abc import Callable
from pathlib import Path

_FORWARD = re.compile(r"\x1b\[(\d*)C")
_ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07]*\x07"
)
_CURSOR_REQUEST = b"\x1b[6n"

ESC = "\x1b"
CTRL_C = "\x03"
CTRL_D = "\x04"
ENTER = "\r"
TAB = "\t"


class PtyProgram:
    """`argv` with a new pty of `rows` x `columns` as its stdin, stdout and stderr.
    `new_session`: start it in a session of its own. `answer_cursor`: reply to each cursor
    position request with "top left" (the prompt then has the rows below it for its menus and
    status line)."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path | None = None,
        rows: int = 40,
        columns: int = 120,
        new_session: bool = False,
        answer_cursor: bool = False,
    ) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env,
                cwd=cwd,
                start_new_session=new_session,
            )
        finally:
            os.close(slave)
        self._master = master
        self._answer_cursor = answer_cursor
        self._raw = b""
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every slave end is closed
                chunk = b""
            if self._answer_cursor:
                for _ in range(chunk.count(_CURSOR_REQUEST)):
                    os.write(self._master, b"\x1b[1;1R")
            with self._changed:
                self._raw += chunk
                self._ended = not chunk
                self._changed.notify_all()
            if not chunk:
                return

    @property
    def raw(self) -> bytes:
        """Everything the program wrote so far."""
        with self._changed:
            return self._raw

    @property
    def ended(self) -> bool:
        """Whether the terminal was closed (the program, and all it started on it, ended)."""
        with self._changed:
            return self._ended

    def wait_for(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until `ready()` (called again whenever more was written) or the terminal
        closed, at most `timeout` seconds; `ready()` then."""
        with self._changed:
            self._changed.wait_for(lambda: self._ended or ready(), timeout)
            return ready()

    def send(self, data: str) -> None:
        os.write(self._master, data.encode())

    def local_modes(self) -> int:
        """The terminal's termios local modes (`termios.ECHO`, `termios.NOFLSH`…) as set now."""
        return termios.tcgetattr(self._master)[3]

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, once the program has ended (what it wrote meanwhile is read)."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        os.close(self._master)


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
        self.program = PtyProgram(
            argv,
            env={**env, "TERM": "xterm-256color"},
            cwd=cwd,
            rows=rows,
            columns=columns,
            new_session=True,
            answer_cursor=True,
        )
        self.proc = self.program.proc
        self._seen = 0
        """Where the next `expect` starts looking in `text`."""

    @property
    def raw(self) -> str:
        """Everything the program wrote, escape sequences included."""
        return self.program.raw.decode("utf-8", "replace")

    @property
    def text(self) -> str:
        # A renderer may move the cursor forward instead of writing spaces.
        spaced = _FORWARD.sub(lambda m: " " * int(m.group(1) or 1), self.raw)
        return _ESCAPES.sub("", spaced).replace("\r", "")

    def _find(self, wanted: str, start: int) -> int:
        """Where `wanted` was drawn at or after `start` in `text`, or -1. prompt_toolkit redraws
        a line by writing only the cells that change and moving the cursor over the others: a
        cell moved over kept what was drawn there before, the character wanted when it was
        moved over for being unchanged. So a match may have such cells, a few, between written
        ends (a long move over a region is no evidence of what it holds)."""
        skipped = _FORWARD.sub(lambda m: "\0" * int(m.group(1) or 1), self.raw)
        drawn = _ESCAPES.sub("", skipped).replace("\r", "")
        pattern = re.compile("".join(f"(?:{re.escape(c)}|\0)" for c in wanted))
        while (found := pattern.search(drawn, start)) is not None:
            match = found.group()
            if match[0] != "\0" and match[-1] != "\0" and match.count("\0") <= len(match) // 4:
                return found.start()
            start = found.start() + 1
        return -1

    def send(self, keys: str) -> None:
        self.program.send(keys)

    def expect(self, wanted: str, timeout: float = 20.0, *, anywhere: bool = False) -> str:
        """Wait until `wanted` appears after what earlier `expect`s matched (`anywhere`: in
        all that was shown); the text up to and including it."""
        start = 0 if anywhere else self._seen
        if not self.program.wait_for(lambda: self._find(wanted, start) >= 0, timeout):
            ended = "the program ended before showing" if self.program.ended else "not shown:"
            raise AssertionError(f"{wanted!r}: {ended} within {timeout} s; screen:\n{self.text}")
        found = self._find(wanted, start)
        begin, self._seen = self._seen, max(self._seen, found + len(wanted))
        return self.text[begin : self._seen]

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, once the program has ended."""
        return self.program.wait(timeout)

    def close(self) -> None:
        self.program.close()
