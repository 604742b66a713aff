"""Work put off to the scheduler's next pass: it runs after the code that put it off has gone
on, in order, on the trio thread; off that thread nothing is put off."""

import threading

import pytest
import trio
import trio.testing

from tether.daemon.coalesce import call_soon


async def test_calls_run_in_the_next_pass_in_the_order_they_were_made() -> None:
    ran: list[str] = []
    assert call_soon(lambda: ran.append("first"))
    assert call_soon(lambda: ran.append("second"))
    ran.append("the caller goes on")
    await trio.testing.wait_all_tasks_blocked()
    assert ran == ["the caller goes on", "first", "second"]
    assert call_soon(lambda: ran.append("later"))  # the task waits for more and is woken
    await trio.testing.wait_all_tasks_blocked()
    assert ran[-1] == "later"


async def test_a_call_that_raises_is_reported_and_the_others_still_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise ValueError("broken on purpose")

    call_soon(broken)
    call_soon(lambda: ran.append("after"))
    await trio.testing.wait_all_tasks_blocked()
    assert ran == ["after"]
    assert "broken on purpose" in capsys.readouterr().err


def test_outside_trio_nothing_is_put_off() -> None:
    ran: list[str] = []
    assert not call_soon(lambda: ran.append("never"))
    assert ran == []


async def test_a_worker_thread_of_a_run_is_not_the_trio_thread() -> None:
    seen: list[bool] = []

    def in_thread() -> None:
        seen.append(call_soon(lambda: None))
        seen.append(threading.current_thread() is not threading.main_thread())

    await trio.to_thread.run_sync(in_thread)
    assert seen == [False, True]
