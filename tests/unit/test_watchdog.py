"""The watchdog that kills the daemon's process groups when the daemon dies, as a real process
over real pipes, and the process table that runs it."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.support import alive, group_survivors, wait_until
from tests.unit.test_ownership import READ_DEATH_SIGNAL, death_signal_of_a_command, write_record
from tether.daemon.procs.env import command_env
from tether.daemon.procs.ownership import GroupRecord, OwnedGroups, start_time
from tether.daemon.procs.spawn import start_child
from tether.daemon.procs.table import ProcessTable
from tether.daemon.procs.watchdog import READY, RELEASE, Watchdog

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


Groups = tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]]


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[Groups]:
    """Two groups, each a shell leading a `sleep` (ours, then a stranger's, killed after), and
    a record naming both: ours as it is, the stranger's with a start time that is not its
    leader's (a reused pid)."""
    started = [
        subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True) for _ in range(2)
    ]
    try:
        for pgid in (proc.pid for proc in started):
            wait_until(lambda p=pgid: len(group_survivors(p)) == 2, "the sleep did not start")
        ours, stranger = started
        record = tmp_path / "processes.json"
        write_record(
            record,
            [
                GroupRecord(pgid=ours.pid, start=start_time(ours.pid), tag="a" * 24),
                GroupRecord(pgid=stranger.pid, start=start_time(stranger.pid) + 1, tag="b" * 24),
            ],
        )
        yield record, ours, stranger
    finally:
        for proc in started:
            if group_survivors(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def end_watchdog(record: Path, last_words: bytes) -> None:
    """Start a watchdog on `record`, wait until it watches, send it `last_words`, end its
    stdin and wait until it exits (successfully)."""
    with subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.daemon.procs.watchdog", str(record)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    ) as watchdog:
        assert watchdog.stdin is not None
        assert watchdog.stdout is not None
        assert watchdog.stdout.read(len(READY)) == READY
        watchdog.stdin.write(last_words)
        watchdog.stdin.close()
        assert watchdog.wait(timeout=30) == 0


def test_when_its_stdin_ends_it_kills_every_group_proven_ours(groups: Groups) -> None:
    record, ours, stranger = groups
    end_watchdog(record, b"")  # what the daemon's death does
    assert ours.wait(timeout=10) == -signal.SIGKILL
    assert group_survivors(ours.pid) == []  # the sleep too, not only the leader
    assert alive(stranger.pid)
    assert len(group_survivors(stranger.pid)) == 2
    assert sorted(OwnedGroups(record).read()) == sorted([ours.pid, stranger.pid])  # only read


def test_a_daemon_gone_before_it_watched_still_has_its_groups_killed(groups: Groups) -> None:
    record, ours, stranger = groups
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody to read READY: the daemon died while the watchdog started
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.daemon.procs.watchdog", str(record)],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    assert watchdog.wait(timeout=30) == 0
    assert ours.wait(timeout=10) == -signal.SIGKILL
    assert alive(stranger.pid)


def test_released_it_exits_and_kills_nothing(groups: Groups) -> None:
    record, ours, stranger = groups
    end_watchdog(record, RELEASE)
    assert alive(ours.pid)
    assert alive(stranger.pid)


def test_bad_arguments_are_refused() -> None:
    ran = subprocess.run(
        [sys.executable, "-P", "-m", "tether.daemon.procs.watchdog"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.returncode == 2
    assert "usage" in ran.stderr


def test_a_child_started_without_the_death_signal_has_none(tmp_path: Path) -> None:
    popen, read_end = start_child(
        [sys.executable, "-c", READ_DEATH_SIGNAL],
        cwd=tmp_path,
        env=command_env(),
        death_signal=False,
    )
    with os.fdopen(read_end, "rb") as output:
        assert output.read().strip() == b"0"
    assert popen.wait(timeout=30) == 0


async def wait_guarded(watchdog: Watchdog | None, guarded: bool) -> None:
    assert watchdog is not None
    with trio.fail_after(30):
        await watchdog.wait_guarded(guarded)
    assert watchdog.owned.guarded is guarded


async def test_the_table_guards_its_commands_while_its_watchdog_runs(tmp_path: Path) -> None:
    table = ProcessTable(record=tmp_path / "processes.json")
    async with trio.open_nursery() as nursery:
        await nursery.start(table.serve)
        await wait_guarded(table.watchdog, True)
        # Guarded: the command needs no death signal of its own.
        assert await death_signal_of_a_command(tmp_path, table.owned) == "0"
        watchdog = table.watchdog
        assert watchdog is not None
        assert watchdog.pid is not None
        first = watchdog.pid
        os.kill(first, signal.SIGKILL)
        await wait_guarded(table.watchdog, False)
        # Without a watchdog, commands get the death signal again, and another one comes.
        assert await death_signal_of_a_command(tmp_path, table.owned) == str(int(signal.SIGKILL))
        await wait_guarded(table.watchdog, True)
        assert watchdog.pid not in (None, first)
        second = watchdog.pid
        assert second is not None
        nursery.cancel_scope.cancel()
    # A clean stop releases it: it exits, having killed nothing.
    assert not alive(second)
    assert watchdog.pid is None
    assert table.owned.guarded is False


async def test_watchdogs_that_never_watch_are_given_up(tmp_path: Path) -> None:
    owned = OwnedGroups(tmp_path / "processes.json")
    # Exits at once, never ready.
    watchdog = Watchdog(owned, command=[sys.executable, "-c", "pass"], restart_seconds=0)
    with trio.fail_after(60):
        await watchdog.serve()
    assert owned.guarded is False
    assert watchdog.pid is None
