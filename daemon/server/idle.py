"""The daemon's idle timer: how long it has had no client and no running turn.

Rules:
- The count starts when the daemon becomes idle and restarts from zero at every change of what
  idleness depends on (a client comes or goes, a turn ends), so a client that connects and
  leaves again within the timeout buys a whole new timeout.
- It never fires while the daemon is busy, however long that lasts.
"""

from collections.abc import Callable

import trio


class IdleTimer:
    """Waits for `timeout` seconds in a row of `is_idle()`. Whoever changes what `is_idle`
    reads calls `touch()`."""

    def __init__(self, timeout: float, is_idle: Callable[[], bool]) -> None:
        self.timeout = timeout
        self._is_idle = is_idle
        self._activity = trio.Event()

    def touch(self) -> None:
        """Something `is_idle` depends on changed: look again, and count from now."""
        self._activity.set()
        self._activity = trio.Event()

    async def wait_idle(self) -> None:
        """Return once the daemon has been idle for `timeout` seconds without a `touch`.
        Cancellable; does nothing else."""
        while True:
            while not self._is_idle():
                await self._activity.wait()
            with trio.move_on_after(self.timeout) as quiet:
                await self._activity.wait()
            if quiet.cancelled_caught and self._is_idle():
                return
