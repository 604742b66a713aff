"""The daemon's idle timer in virtual time: when it fires, and what holds it off. (That the
daemon stops when it fires is in tests/e2e/test_daemon_lifecycle.py.)"""

import pytest
import trio

from tether.daemon.server.idle import IdleTimer

TIMEOUT = 900.0


class Busy:
    """What the daemon's idleness reads: clients connected and turns running."""

    def __init__(self, clients: int = 0, turns: int = 0) -> None:
        self.clients = clients
        self.turns = turns
        self.timer = IdleTimer(TIMEOUT, lambda: self.clients == 0 and self.turns == 0)
        self.fired_at: float | None = None

    def change(self, *, clients: int | None = None, turns: int | None = None) -> None:
        self.clients = self.clients if clients is None else clients
        self.turns = self.turns if turns is None else turns
        self.timer.touch()

    async def watch(self) -> None:
        await self.timer.wait_idle()
        self.fired_at = trio.current_time()


async def test_it_fires_a_whole_timeout_after_the_last_client_leaves(
    autojump_clock: trio.abc.Clock,
) -> None:
    busy = Busy(clients=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy.watch)
        await trio.sleep(10 * TIMEOUT)
        assert busy.fired_at is None, "fired with a client connected"
        left = trio.current_time()
        busy.change(clients=0)
    assert busy.fired_at == pytest.approx(left + TIMEOUT)


async def test_a_client_that_comes_and_goes_starts_the_count_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    busy = Busy()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy.watch)
        await trio.sleep(TIMEOUT * 0.75)
        busy.change(clients=1)
        busy.change(clients=0)
        again = trio.current_time()
        await trio.sleep(TIMEOUT * 0.5)
        assert busy.fired_at is None
    assert busy.fired_at == pytest.approx(again + TIMEOUT)


async def test_a_running_turn_holds_it_off_and_its_end_starts_the_count(
    autojump_clock: trio.abc.Clock,
) -> None:
    busy = Busy(clients=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy.watch)
        busy.change(clients=0, turns=1)  # the client started a turn and left
        await trio.sleep(5 * TIMEOUT)
        assert busy.fired_at is None, "fired with a turn running"
        ended = trio.current_time()
        busy.change(turns=0)
    assert busy.fired_at == pytest.approx(ended + TIMEOUT)
