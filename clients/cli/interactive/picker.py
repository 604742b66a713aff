"""A list to choose from, drawn inline under the scrollback (not full screen) and erased once
a choice is made: ↑/↓ (or k/j) move, Enter picks, Esc or Ctrl-C gives up."""

from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl

SHOWN = 10
"""Rows of the list on screen at once; it scrolls with the selection."""


def window_start(selected: int, count: int, shown: int = SHOWN) -> int:
    """The first row shown so that `selected` is on screen, the list scrolling with it."""
    if count <= shown:
        return 0
    return min(max(selected - shown // 2, 0), count - shown)


async def pick(options: list[tuple[str, str]], *, current: str | None = None) -> str | None:
    """The key of the option chosen among `options` (key, label), None when given up.
    Starts on `current` when it is one of the keys."""
    keys = [key for key, _ in options]
    selected = [keys.index(current) if current in keys else 0]

    def rows() -> StyleAndTextTuples:
        start = window_start(selected[0], len(options))
        out: StyleAndTextTuples = [("class:title", "choose a session (↑/↓, Enter; Esc leaves)\n")]
        for index in range(start, min(start + SHOWN, len(options))):
            key, label = options[index]
            mark = "> " if index == selected[0] else "  "
            style = "reverse" if index == selected[0] else ""
            here = "  (this one)" if key == current else ""
            out.append((style, f"{mark}{key}  {label}{here}\n"))
        return out

    kb = KeyBindings()

    @kb.add("up")
    @kb.add("k")
    def _(event: KeyPressEvent) -> None:
        selected[0] = max(selected[0] - 1, 0)

    @kb.add("down")
    @kb.add("j")
    def _(event: KeyPressEvent) -> None:
        selected[0] = min(selected[0] + 1, len(options) - 1)

    @kb.add("enter")
    def _(event: KeyPressEvent) -> None:
        event.app.exit(result=keys[selected[0]])

    @kb.add("escape")
    @kb.add("c-c")
    @kb.add("q")
    def _(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    app: Application[str | None] = Application(
        layout=Layout(HSplit([Window(FormattedTextControl(rows, show_cursor=False))])),
        key_bindings=kb,
        full_screen=False,
        erase_when_done=True,
    )
    app.ttimeoutlen = 0.05
    return await app.run_async()
