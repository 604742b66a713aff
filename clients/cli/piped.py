"""Text piped into `tether run`: the prompt itself when no prompt argument is given, else an
attachment to the message (`cat build.log | tether run "why does this fail?"`).

Stdin is read only when it is a pipe, a file or a socket. What is read is kept whole up to
about 1 MB; beyond that its head and tail are kept, the cut marked and reported (the daemon
cuts it further, within the budget the message's attachments share, or refuses a prompt too
large for the model). Text holding a NUL in its first 8 KiB is binary, which no model can
read: the command refuses it before anything is sent.
"""

import os
import stat
import sys

from tether.clients.cli.exit_codes import EXIT_USAGE, CliError

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

PIPED_HEAD = 400_000
PIPED_TAIL = 600_000
"""Bytes of piped text kept from its start and its end: far more than the model is shown (the
daemon gives attachments 40,000 characters), well below the daemon's 16 MiB frame limit."""
_CHUNK = 1 << 16


def stdin_may_hold_text() -> bool:
    """Whether stdin is a pipe, a file or a socket: something that may hold text to read (not a
    terminal, nor /dev/null or another device)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def read_piped(
    stream: "BinaryIO | None",
    *,
    may_hold_text: bool,
    on_cut: "Callable[[int, int], None] | None" = None,
) -> str | None:
    """The text piped into `stream`, or None when it cannot hold any (see
    `stdin_may_hold_text`; a terminal is never read). Raises `CliError` for binary input.
    `on_cut(total, skipped)` is told the bytes read and those left out, when some were."""
    if stream is None or not may_hold_text:
        return None
    head = bytearray()
    tail = bytearray()
    skipped = 0
    while chunk := stream.read(_CHUNK):
        room = PIPED_HEAD - len(head)
        head += chunk[:room]
        tail += chunk[room:] if room > 0 else chunk
        if len(tail) > 2 * PIPED_TAIL:
            skipped += len(tail) - PIPED_TAIL
            del tail[: len(tail) - PIPED_TAIL]
    if len(tail) > PIPED_TAIL:
        skipped += len(tail) - PIPED_TAIL
        del tail[: len(tail) - PIPED_TAIL]
    if b"\0" in head[:8192]:
        raise CliError("stdin holds binary data; pipe text into `tether run`", EXIT_USAGE)
    if not skipped:
        return bytes(head + tail).decode("utf-8", errors="replace")
    if on_cut is not None:
        on_cut(len(head) + skipped + len(tail), skipped)
    cut = f"\n[… {skipped:,} bytes of piped input left out …]\n"
    return head.decode("utf-8", errors="replace") + cut + tail.decode("utf-8", errors="replace")
