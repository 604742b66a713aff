"""The renderer's stream in interactive mode: whole lines go to the terminal above the prompt,
the line still being written is held back and shown in the prompt's live area.

A line written into the scrollback stays there, so nothing is ever taken back: text without
its newline yet (a reply mid-stream) lives only in `tail`, which the prompt redraws, until the
line is complete.
"""

import io
from collections.abc import Callable


class TerminalLines(io.StringIO):
    """A text stream for `Renderer`: `write` buffers, complete lines go to `emit` (with their
    newlines) on `flush`; `changed` is called whenever `tail` may have changed."""

    def __init__(self, emit: Callable[[str], None], changed: Callable[[], None]) -> None:
        super().__init__()
        self._emit = emit
        self._changed = changed
        self._done: list[str] = []
        self.tail = ""
        """The line being written, without its newline."""

    def isatty(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        before, newline, after = text.rpartition("\n")
        if newline:
            self._done.append(self.tail + before + newline)
            self.tail = after
        else:
            self.tail += text
        return len(text)

    def flush(self) -> None:
        if self._done:
            lines, self._done = "".join(self._done), []
            self._emit(lines)
        self._changed()

    def note(self, text: str) -> None:
        """Print `text` (lines) now, above the held line, which stays held: the interactive
        mode's own messages never split a line the renderer is writing."""
        self.flush()
        self._emit(text if text.endswith("\n") else text + "\n")
