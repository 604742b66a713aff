"""Work put off to the trio scheduler's next pass, so that what a burst of code produces (the
several events of one step, fanned out to several clients) is handed on together: one socket
write per client, one wake of the store's thread, instead of one each.

A call put off with `call_soon` runs on the trio thread once the tasks runnable now have run,
in a system task of the run (one per run, started when first needed). Calls run in the order
they were made; a call made while they run runs after them. `this_pass` tells a burst from
its first item, which can go at once (no added latency for a lone event).
"""

import traceback
from collections.abc import Callable

import trio


class _Pending:
    __slots__ = ("calls", "passes", "task", "ticking")

    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []
        self.task: trio.lowlevel.Task | None = None
        """The system task while it waits for calls (it is rescheduled by the next one)."""
        self.passes = 0
        """How many times the system task has run: moved on in the pass after one asked."""
        self.ticking = False
        """The system task will run in the next pass."""


_PENDING = trio.lowlevel.RunVar[_Pending]("tether_coalesce")


def call_soon(fn: Callable[[], None]) -> bool:
    """Run `fn` in the scheduler's next pass; False (nothing put off) when not called on a
    trio thread, where the caller does the work at once. `fn` must not raise: what it raises
    is printed to stderr (the daemon's log) and the other calls still run."""
    pending = _ticking()
    if pending is None:
        return False
    pending.calls.append(fn)
    return True


def this_pass() -> int | None:
    """A number that stays the same for the rest of the scheduler's current pass and is
    another one in a later pass (None off the trio thread)."""
    pending = _ticking()
    return None if pending is None else pending.passes


def _ticking() -> _Pending | None:
    """The run's state, its system task bound to run in the next pass."""
    try:
        pending = _PENDING.get()
    except LookupError:
        pending = _Pending()
        _PENDING.set(pending)
        pending.ticking = True
        trio.lowlevel.spawn_system_task(_run, pending, name="tether-coalesce")
    except RuntimeError:
        return None
    if not pending.ticking:
        pending.ticking = True
        task = pending.task
        if task is not None:
            pending.task = None
            trio.lowlevel.reschedule(task)
    return pending


async def _run(pending: _Pending) -> None:
    while True:
        if not pending.ticking:
            pending.task = trio.lowlevel.current_task()
            try:
                await trio.lowlevel.wait_task_rescheduled(_abort)
            finally:
                pending.task = None
        pending.ticking = False
        pending.passes += 1
        calls, pending.calls = pending.calls, []
        for fn in calls:
            try:
                fn()
            except Exception:  # a raise here would end the whole run
                traceback.print_exc()
        if pending.ticking:  # asked for again while the calls ran: that is the next pass
            await trio.lowlevel.cancel_shielded_checkpoint()


def _abort(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED
