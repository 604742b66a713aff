"""The two streams a `Renderer` writes to, and what is drawn at the bottom of `err`'s (or
`out`'s) terminal: the live region, redrawn in place, and the approval question, which lines
printed while it is on go above (see `renderer` for the rules)."""

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tether.clients.cli.render.styled import Painter


def color_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether escape sequences may be written to a terminal: not when `NO_COLOR` is set
    (to anything but "") or TERM is `dumb`."""
    env = os.environ if environ is None else environ
    return not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def _terminal_size(out: TextIO) -> Callable[[], tuple[int, int]]:
    def size() -> tuple[int, int]:
        try:
            columns, lines = os.get_terminal_size(out.fileno())
        except (OSError, ValueError, AttributeError):
            return 80, 24
        return columns, lines

    return size


class Screen:
    """Whole lines printed for good on `out` and `err`, above the live region and the
    question; the region redrawn from the lines it is given."""

    def __init__(
        self,
        *,
        json_mode: bool,
        out: TextIO | None,
        err: TextIO | None,
        live: bool | None,
        terminal_size: Callable[[], tuple[int, int]] | None,
        status_live: bool | None,
        color: bool | None,
        region: bool,
    ) -> None:
        """The arguments are `Renderer`'s, which documents them."""
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.out.isatty() if live is None else live
        status_live = self.err.isatty() if status_live is None else status_live
        color = color_allowed() if color is None else color
        self.styled_out = bool(self.live and color and not json_mode)
        self.styled_err = bool(status_live and color and not json_mode)
        self.painter: Painter | None = None
        if self.styled_out or self.styled_err:
            from tether.clients.cli.render import styled  # rich: only for a terminal

            self.painter = styled.Painter()
        self.region = region
        self.region_stream: TextIO | None = (
            None
            if not region
            else self.err
            if self.styled_err
            else self.out
            if self.styled_out
            else None
        )
        self.drawn: list[str] = []
        """The live region as drawn: lines at the bottom of the screen, cursor below them."""
        self.hidden = False
        """An approval is being asked: draw no region."""
        self.hold = False
        """Redraw the region only at the next tick (someone else may write first)."""
        self._terminal_size = terminal_size or _terminal_size(self.region_stream or self.out)
        self.mid_line = False
        """`out`'s last line is not ended yet."""
        self.erasable: str | None = None
        """The streamed message whose text is all that was printed since it started."""
        self.question: str | None = None
        """The approval question on `err`'s line, waiting for its one-key answer."""

    def size(self) -> tuple[int, int]:
        columns, lines = self._terminal_size()
        return max(columns, 20), max(lines, 4)

    def err_painter(self) -> "Painter | None":
        return self.painter if self.styled_err else None

    def _on_screen(self, stream: TextIO) -> bool:
        return bool(
            (stream is self.out and self.styled_out) or (stream is self.err and self.styled_err)
        )

    def clear_region(self) -> None:
        if self.drawn and self.region_stream is not None:
            self.region_stream.write(f"\r\x1b[{len(self.drawn)}A\x1b[J")
            self.region_stream.flush()
        self.drawn = []

    def emit(self, stream: TextIO, lines: list[str]) -> None:
        """Print whole lines for good, above the live region and the question."""
        if not lines:
            return
        if self._on_screen(stream):
            self.clear_region()
        elif stream is self.err:
            self.newline()
        question = self.question if stream is self.err or self.live else None
        if question is not None:
            self._take_question_off(question)
        self.erasable = None
        stream.write("".join(f"{line}\n" for line in lines))
        stream.flush()
        if question is not None:
            self.err.write(question)
            self.err.flush()

    def _take_question_off(self, question: str) -> None:
        """Before a line is printed: erase the question when it fits on its line, else end
        that line (the question is drawn again below what is printed)."""
        columns, _ = self.size()
        if self.styled_err and len(question) < columns:
            self.err.write("\r\x1b[K")
        else:
            self.err.write("\n")
        self.err.flush()

    def newline(self) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False

    def say(self, line: str, level: str = "info") -> None:
        """One line of tether's own on `err`, prefixed `tether: `."""
        text = f"tether: {line}"
        painter = self.err_painter()
        self.emit(self.err, [painter.notice(text, level) if painter is not None else text])

    def ask(self, text: str | None) -> None:
        """See `Renderer.question`."""
        if text is not None:
            self.clear_region()
            self.newline()
            self.err.write(text)
            self.err.flush()
        self.question = text

    def end_question(self) -> None:
        if self.question is not None:
            self.question = None
            self.err.write("\n")
            self.err.flush()

    def refresh(self, region_lines: Callable[[], list[str]]) -> None:
        """Flush both streams and redraw the live region as `region_lines` gives it (not
        asked while the region is hidden or held)."""
        self.out.flush()
        if self.region_stream is None or self.hold:
            self.err.flush()
            return
        hidden = self.hidden or self.question is not None
        lines = [] if hidden else region_lines()
        if lines != self.drawn:
            self.clear_region()
            self.region_stream.write("".join(f"{line}\n" for line in lines))
            self.drawn = lines
        self.region_stream.flush()
        self.err.flush()
