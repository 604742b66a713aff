"""What tether writes on a terminal survives the Ctrl-C that made it write.

On the interrupt character a terminal's line discipline sends SIGINT and then, unless the
termios flag NOFLSH is set, throws away the output the terminal has not shown yet. The two
race: a line written as soon as the signal lands (the notice that a detach left the turn
running and how to stop it, the reply streamed just before) can be discarded after it was
written. While a turn is followed NOFLSH is set, and afterwards put back as it was.
"""

import sys
from collections.abc import Generator
from contextlib import contextmanager, suppress
from typing import TextIO

try:
    import termios
except ImportError:  # no terminals to keep output on
    termios = None

_LFLAG = 3
"""The local modes' index in `termios.tcgetattr`'s list."""


@contextmanager
def output_kept_on_interrupt(stream: TextIO | None = None) -> Generator[None]:
    """Set NOFLSH on the terminal `stream` (default stdin) is, for the block; nothing when
    it is no terminal. Only that flag is put back: what else changed meanwhile stays."""
    fd = _terminal_fd(stream or sys.stdin)
    if termios is None or fd is None:
        yield
        return
    try:
        was_set = bool(termios.tcgetattr(fd)[_LFLAG] & termios.NOFLSH)
        if not was_set:
            _set_noflsh(fd, on=True)
    except termios.error:  # not a terminal after all, or gone
        yield
        return
    try:
        yield
    finally:
        if not was_set:
            with suppress(termios.error):  # the terminal went away: nothing to put back
                _set_noflsh(fd, on=False)


def _terminal_fd(stream: TextIO | None) -> int | None:
    if stream is None:
        return None
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # closed, or in memory
        return None
    return fd if stream.isatty() else None


def _set_noflsh(fd: int, *, on: bool) -> None:
    assert termios is not None
    attributes = termios.tcgetattr(fd)
    if on:
        attributes[_LFLAG] |= termios.NOFLSH
    else:
        attributes[_LFLAG] &= ~termios.NOFLSH
    termios.tcsetattr(fd, termios.TCSANOW, attributes)
