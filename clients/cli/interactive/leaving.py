"""Ctrl-C twice in a row leaves the interactive mode; once, it clears the draft and says so.

The second press counts when nothing was typed between the two and the hint ("Ctrl-C again to
leave") has been on screen less than `CTRL_C_AGAIN_S`. The window opens when the hint is first
drawn, not when the first press was read: a redraw delayed by a busy machine must neither hide
the hint nor leave less time to answer it than the user sees it for.
"""

import time
from collections.abc import Callable

CTRL_C_AGAIN_S = 3.0
"""How long the hint stays, during which a second Ctrl-C leaves."""


class SecondCtrlC:
    """The state between a first Ctrl-C and a second. `clock` is monotonic seconds."""

    def __init__(
        self, window: float = CTRL_C_AGAIN_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window
        self._clock = clock
        self._pressed = False
        self._shown_at: float | None = None
        """When the hint was first drawn after the press; None until it is."""

    def press(self) -> None:
        """A first Ctrl-C was read: the hint shows from the next draw on."""
        self._pressed = True
        self._shown_at = None

    def forget(self) -> None:
        """Something was typed: the next Ctrl-C is a first one again."""
        self._pressed = False
        self._shown_at = None

    def armed(self) -> bool:
        """Whether a Ctrl-C now is the second in a row (and leaves)."""
        if not self._pressed:
            return False
        if self._shown_at is None or self._clock() - self._shown_at < self._window:
            return True
        self.forget()
        return False

    def hint_drawn(self) -> bool:
        """For the toolbar, at each draw: whether to show the hint (which then counts as shown
        from this draw on, if it is the first)."""
        if not self.armed():
            return False
        if self._shown_at is None:
            self._shown_at = self._clock()
        return True
