"""A command's output: bytes from its pipe to clean text, kept head and tail, passed on in
batches.

Rules:
- Output is decoded as UTF-8 incrementally (invalid bytes replaced) and loses its terminal
  escape sequences and control characters (tabs, newlines and carriage returns stay), even
  when a chunk ends inside a sequence (`OutputDecoder`).
- What is kept of a foreground command's output is its first and last characters and its
  length (`OutputBuffer`); the middle is counted, not held. Progress-bar redraws (`\\r`) are
  collapsed when it is rendered.
- `pump` reads a pipe to its end; with an interval it passes text on at most once per
  interval, or as soon as `BATCH_CHARS` are waiting, so a chatty command does not become
  thousands of events a second.
"""

import codecs
import math
import re
from collections.abc import Callable

import trio

from tether.daemon.truncate import cut_marker

BATCH_CHARS = 65536
"""Batched output is passed on as soon as this many characters are waiting."""

_ESCAPE = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC
    r"|[ -/]*[0-OQ-WYZ\\`-~]"  # other short escapes (not the openers above)
    r")"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
_HOLD_BACK = 256


def strip_ansi(text: str) -> str:
    """`text` without terminal escape sequences and control characters (tabs, newlines and
    carriage returns stay)."""
    return _CONTROL.sub("", _ESCAPE.sub("", text)).replace("\x1b", "")


def collapse_carriage_returns(text: str) -> str:
    """Progress bars redraw a line with `\\r`; keep what each line finally showed."""
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line else line for line in lines)


class OutputDecoder:
    """Bytes from a pipe to clean text, chunk by chunk: UTF-8 decoded incrementally (invalid
    bytes replaced), escape sequences removed even when a chunk ends inside one."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes | bytearray) -> str:
        text = self._pending + self._utf8.decode(data)
        self._pending = ""
        escape = text.rfind("\x1b")
        if escape != -1 and len(text) - escape < _HOLD_BACK and _ESCAPE.match(text, escape) is None:
            # Every sequence has a definite end, so this one may be incomplete: decide when
            # the next chunk arrives.
            text, self._pending = text[:escape], text[escape:]
        return strip_ansi(text)

    def flush(self) -> str:
        text = self._pending + self._utf8.decode(b"", final=True)
        self._pending = ""
        return strip_ansi(text)


class OutputBuffer:
    """Keeps the first `head` and the last `tail` characters of a stream, and its length."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit = head
        self.tail_limit = tail
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.total = 0

    def append(self, text: str) -> None:
        self.total += len(text)
        room = self.head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        if self._tail_len > 2 * self.tail_limit:
            joined = "".join(self._tail)[-self.tail_limit :]
            self._tail = [joined]
            self._tail_len = len(joined)

    def render(self, head: int, tail: int) -> str:
        """All of the output if it has at most `head + tail` characters; otherwise exactly
        its first `head` and last `tail` characters (`head` and `tail` no larger than the
        buffer's) around a marker saying how many were cut. Progress-bar redraws collapsed."""
        head_text = "".join(self._head)
        tail_text = "".join(self._tail)
        if len(head_text) + len(tail_text) == self.total:  # nothing dropped
            full = head_text + tail_text
            if self.total <= head + tail:
                return collapse_carriage_returns(full)
            head_text, tail_text = full, full
        shown_tail = tail_text[len(tail_text) - tail :] if tail else ""
        return (
            collapse_carriage_returns(head_text[:head])
            + cut_marker(self.total - head - tail)
            + collapse_carriage_returns(shown_tail)
        )


async def pump(
    stream: trio.abc.ReceiveStream,
    decoder: OutputDecoder,
    sink: Callable[[str], None],
    eof: trio.Event,
    *,
    interval: float = 0.0,
) -> None:
    """Read the pipe to its end, passing clean text to `sink`: with an `interval`, text is
    gathered and passed on at most once per interval (or once `BATCH_CHARS` are waiting), so
    a command printing a line a millisecond does not become a thousand events a second."""
    pending: list[str] = []
    pending_len = 0
    flushed = trio.current_time()

    def flush() -> None:
        nonlocal pending_len, flushed
        if pending:
            sink("".join(pending))
            pending.clear()
            pending_len = 0
        flushed = trio.current_time()

    while True:
        deadline = flushed + interval if pending else math.inf
        with trio.move_on_at(deadline):
            data = await stream.receive_some(65536)
            if not data:
                break
            text = decoder.feed(data)
            if text:
                pending.append(text)
                pending_len += len(text)
            if pending_len < BATCH_CHARS and trio.current_time() < flushed + interval:
                continue
        flush()
    rest = decoder.flush()
    if rest:
        pending.append(rest)
    flush()
    eof.set()
