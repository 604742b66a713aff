"""The `tether` CLI on a real pseudo-terminal, as a person runs it.

The pty's slave end is the process's stdin, stdout and stderr and its controlling terminal
(`setsid --ctty`), in a session of its own, so what the test types goes through the terminal
driver: `\\x03` becomes SIGINT for the CLI (and only the CLI), a line is delivered on Enter, and
input is echoed.
"""

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import pytest

from tests.screen import PtyProgram
from tests.support import Home


class TerminalCli:
    """One `tether` command on a terminal `columns` wide; read what it shows with `expect`."""

    def __init__(
        self,
        home: Home,
        *args: str,
        cwd: Path | None = None,
        columns: int = 240,
        env: Mapping[str, str] | None = None,
        module: str = "tether.clients.cli.main",
    ):
        """`env` is added to `home`'s environment, for this command alone; `module` is the
        program run with `args` (one of tests', such as `tests.paused_cli`, or the CLI)."""
        setsid = shutil.which("setsid")
        if setsid is None:
            pytest.skip("setsid (util-linux) is needed to give the CLI a controlling terminal")
        self.program = PtyProgram(
            # -w: should setsid have to fork, its exit status is still the CLI's.
            [setsid, "-w", "-c", sys.executable, "-P", "-m", module, *args],
            env={**home.env, **(env or {})},
            cwd=cwd,
            rows=50,
            columns=columns,
        )
        self.proc = self.program.proc
        self._seen = 0

    @property
    def shown(self) -> str:
        """Everything the terminal showed so far (newlines as `\\n`)."""
        return self.program.raw.decode("utf-8", "replace").replace("\r\n", "\n")

    def expect(self, text: str, timeout: float = 20.0) -> str:
        """Wait until `text` is shown after what earlier `expect`s matched; return what was
        shown up to the end of it."""
        if not self.program.wait_for(lambda: text in self.shown[self._seen :], timeout):
            raise AssertionError(f"{text!r} not shown; the terminal shows:\n{self.shown}")
        shown = self.shown
        at = shown.find(text, self._seen)
        before, self._seen = shown[self._seen : at + len(text)], at + len(text)
        return before

    def send(self, text: str) -> None:
        self.program.send(text)

    def wait(self, timeout: float = 20.0) -> int:
        return self.program.wait(timeout)

    def close(self) -> None:
        self.program.close()

    def __enter__(self) -> "TerminalCli":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
