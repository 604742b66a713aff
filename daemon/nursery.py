"""A nursery that a long-lived service (the process table, the language-server pool) lends to
the tasks it starts for its callers while it serves."""

import trio


class LentNursery:
    """The nursery of a service's `serve`, lent out by `lend`: `nursery` is None before that
    and again from the moment `serve` is cancelled, so that nothing new starts while the
    service's own tasks stop."""

    __slots__ = ("nursery",)

    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None

    async def lend(self, nursery: trio.Nursery, task_status: trio.TaskStatus[None]) -> None:
        """Lend `nursery` and report the service started; wait until cancelled, then take the
        nursery back (the cancellation propagates)."""
        self.nursery = nursery
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.nursery = None
