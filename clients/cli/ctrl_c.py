"""Ctrl-C while `tether run` sets its turn up: remembered, then acted on.

From the request that creates a session until the turn is followed, a KeyboardInterrupt would
leave a session with nothing in it, or a turn running that nobody follows (one waiting for an
approval nobody sees). While `held`, SIGINT only sets `pressed`; the command then does what
Ctrl-C means as soon as it can: it deletes the session it created and starts no turn, or it
cancels the turn it started. Before `held`, Ctrl-C interrupts as usual: nothing was created.
"""

import signal

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from types import FrameType


class HeldCtrlC:
    """SIGINT held from `hold` until `release` (the previous handler back); `pressed` says
    whether it came meanwhile. Main thread only, as every signal handler."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: object = None
        self._holding = False

    def hold(self) -> "HeldCtrlC":
        if not self._holding:
            self._previous = signal.signal(signal.SIGINT, self._press)
            self._holding = True
        return self

    def release(self) -> bool:
        """Stop holding (idempotent); whether Ctrl-C was pressed while held."""
        if self._holding:
            signal.signal(signal.SIGINT, self._previous)  # pyright: ignore[reportArgumentType]
            self._holding = False
        return self.pressed

    def _press(self, signum: int, frame: "FrameType | None") -> None:
        self.pressed = True
