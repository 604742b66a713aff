"""Output for a terminal, drawn with rich: Markdown, highlighted code, coloured diffs, marks.

Imported only when a stream is a terminal that takes colour, so that plain output (a pipe, a
file, `NO_COLOR`) never loads rich. Every text handed in here has been escaped with
`visible` already; styles are applied to `Text` objects, never parsed from markup, so a
bracket in model text stays a bracket. Links are shown with their address (no terminal
hyperlinks), so that a link's words cannot hide where it points.
"""

import io
import re

from rich.console import Console
from rich.markdown import Markdown
from rich.style import Style
from rich.text import Text

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
CODE_THEME = "monokai"
_TRAILING_SPACES = re.compile(r" +$", re.M)

_LEVEL_STYLES = {"error": "bold red", "warning": "yellow", "info": "dim"}
_DIFF_STYLES = (
    ("+++", "bold"),
    ("---", "bold"),
    ("@@", "cyan"),
    ("+", "green"),
    ("-", "red"),
    ("…", "dim"),
)


class Painter:
    """Turns text into lines of terminal output (escape sequences included, no newlines)."""

    def __init__(self) -> None:
        self._console = Console(
            file=io.StringIO(),
            force_terminal=True,
            color_system="auto",
            highlight=False,
            emoji=False,
            markup=False,
            width=80,
        )

    def _lines(self, renderable: Markdown | Text, width: int) -> list[str]:
        self._console.width = max(width, 20)
        with self._console.capture() as capture:
            self._console.print(renderable)
        return _TRAILING_SPACES.sub("", capture.get()).rstrip("\n").split("\n")

    def markdown(self, text: str, width: int) -> list[str]:
        """`text` (escaped Markdown) rendered to lines at most `width` cells wide, without
        the blank lines around it."""
        if not text.strip():
            return []
        lines = self._lines(Markdown(text, code_theme=CODE_THEME, hyperlinks=False), width)
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        return lines

    def line(self, text: str, style: str = "", width: int = 0) -> str:
        """One line of plain `text` in `style` (a rich style name: "dim", "bold red"),
        cut to `width` cells when `width` is given."""
        shown = Text(text, style=Style.parse(style) if style else "", no_wrap=True)
        if width:
            shown.truncate(width, overflow="ellipsis")
        return self._lines(shown, max(width, shown.cell_len, 1))[0]

    def spans(self, parts: list[tuple[str, str]], width: int = 0) -> str:
        """One line made of (text, style) parts, cut to `width` cells when given."""
        shown = Text(no_wrap=True)
        for text, style in parts:
            shown.append(text, style=Style.parse(style) if style else "")
        if width:
            shown.truncate(width, overflow="ellipsis")
        return self._lines(shown, max(width, shown.cell_len, 1))[0]

    def notice(self, text: str, level: str) -> str:
        return self.line(text, _LEVEL_STYLES.get(level, ""))

    def diff(self, lines: list[str]) -> list[str]:
        """A unified diff's lines, coloured: headers bold, hunks cyan, + green, - red."""
        return [self.line(line, _diff_style(line)) for line in lines]


def _diff_style(line: str) -> str:
    for prefix, style in _DIFF_STYLES:
        if line.startswith(prefix):
            return style
    return ""
