"""Whoever reads the command's output: a terminal, a file, or a pipe whose reader may leave
(`tether sessions | head -1`). A command whose reader left ends quietly, as Unix tools do."""

import os
import select
import sys

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from typing import IO


def reader_gone(out: "IO[str]") -> bool:
    """Whether whoever read `out` is gone (a pipe's reader closed it: `| head`, or the ssh
    session of `tether --remote … daemon logs -f` that ended). A terminal never reports it, and
    its hangup comes as a signal."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered for a reader that left (and
    the interpreter's flush at exit) goes nowhere instead of failing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
