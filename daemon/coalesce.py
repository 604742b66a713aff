"""Work put off to the trio scheduler's next pass, so that what a burst of code produces (the
store writes of a step's several events) is handed on together: one wake of the store's
thread instead of one per write.

A call put off with `call_soon` runs on the trio thread once the tasks runnable now have run,
in a system task of the run (one per run, started by the first call). Calls run in the order
they were made; a call made while they run runs after them.
"""

import traceback
from collections.abc import Callable

import trio


class _Pending:
    __slots__ = ("calls", "task")

    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []
        self.task: trio.lowlevel.Task | None = None
        """The system task while it waits for calls (it is rescheduled by the next one)."""


_PENDING = trio.lowlevel.RunVar[_Pending]("tether_coalesce")


def call_soon(fn: Callable[[], None]) -> bool:
    """Run `fn` in the scheduler's next pass; False (nothing put off) when not called on a
    trio thread, where the caller does the work at once. `fn` must not raise: what it raises
    is printed to stderr (the daemon's log) and the other calls still run."""
    try:
        pending = _PENDING.get()
    except LookupError:
        pending = _Pending()
        _PENDING.set(pending)
        trio.lowlevel.spawn_system_task(_run, pending, name="tether-coalesce")
    except RuntimeError:
        return False
    pending.calls.append(fn)
    task = pending.task
    if task is not None:
        pending.task = None
        trio.lowlevel.reschedule(task)
    return True


async def _run(pending: _Pending) -> None:
    while True:
        if not pending.calls:
            pending.task = trio.lowlevel.current_task()
            try:
                await trio.lowlevel.wait_task_rescheduled(_abort)
            finally:
                pending.task = None
        calls, pending.calls = pending.calls, []
        for fn in calls:
            try:
                fn()
            except Exception:  # a raise here would end the whole run
                traceback.print_exc()


def _abort(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED
