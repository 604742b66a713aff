"""The workspace lock as clients see it (probe, record, what to do about a holder) and the
daemon's upkeep of its discovery file; in-process, on real files and real `flock`s."""

import fcntl
import os
import shutil
from functools import partial
from pathlib import Path

import msgspec
import pytest
import trio

from tether.clients.core.discovery import REWRITE_GRACE, START_TIMEOUT, Held, assess, probe_lock
from tether.daemon.server.lifecycle import AlreadyRunning, WorkspaceLock, keep_discovery
from tether.protocol.discovery import DISCOVERY_CHECK_INTERVAL, DiscoveryInfo, LockRecord

NOW = 1_700_000_000.0


def info(pid: int, port: int = 4000) -> DiscoveryInfo:
    return DiscoveryInfo(
        pid=pid,
        port=port,
        token="t" * 64,
        protocol_version=1,
        daemon_version="0",
        workspace="/w",
        started_at=NOW,
    )


# --- the probe ----------------------------------------------------------------------------------


def test_probe_sees_no_daemon_without_a_lock_file_or_with_a_free_one(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    assert probe_lock(path) is None
    path.write_text('{"pid": 1, "state": "serving", "startedAt": 0}')  # a dead daemon's
    assert probe_lock(path) is None


def test_probe_reads_the_holders_record_through_each_state(tmp_path: Path) -> None:
    path = tmp_path / "run" / "daemon.lock"
    lock = WorkspaceLock(path)
    lock.acquire()
    try:
        held = probe_lock(path)
        first = LockRecord(pid=os.getpid(), state="starting", started_at=lock.started_at)
        assert held == Held(first)
        for state in ("serving", "stopping"):
            lock.record(state)
            held = probe_lock(path)
            assert held is not None
            assert held.record is not None
            assert (held.record.pid, held.record.state) == (os.getpid(), state)
        # Probing never takes the lock from its holder.
        with pytest.raises(AlreadyRunning):
            WorkspaceLock(path).acquire(patience=0)
    finally:
        lock.release()
    assert probe_lock(path) is None
    assert path.read_bytes() == b""  # the next holder's readers see no stale record


def test_a_holder_caught_before_its_first_record_is_held_with_no_record(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert probe_lock(path) == Held(None)
        os.write(fd, b'{"pid": 12, "sta')  # half-written
        assert probe_lock(path) == Held(None)
    finally:
        os.close(fd)
    assert probe_lock(path) is None


def test_acquire_outlasts_a_probe_but_not_a_daemon(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    path.touch()
    # A client's probe holds a shared lock for an instant; the daemon retries through it.
    probe = os.open(path, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH)
    waits: list[float] = []

    def probe_ends(seconds: float) -> None:
        waits.append(seconds)
        os.close(probe)

    lock = WorkspaceLock(path)
    lock.acquire(sleep=probe_ends)
    try:
        assert len(waits) == 1
        held = probe_lock(path)
        assert held is not None
        assert held.record is not None
        assert held.record.pid == os.getpid()
        # A daemon holds it for good: the second one gives up.
        with pytest.raises(AlreadyRunning):
            WorkspaceLock(path).acquire(patience=0.05)
    finally:
        lock.release()


def test_a_refused_daemon_learns_who_holds_the_lock_and_where_its_discovery_file_is(
    tmp_path: Path,
) -> None:
    path = tmp_path / "daemon.lock"
    lock = WorkspaceLock(path)
    lock.acquire()
    try:
        lock.record("serving", discovery=tmp_path / "run" / "daemon-k.json")
        lock.moved(tmp_path / "elsewhere" / "daemon-k.json")
        with pytest.raises(AlreadyRunning) as refused:
            WorkspaceLock(path).acquire(patience=0)
        assert refused.value.holder == LockRecord(
            pid=os.getpid(),
            state="serving",
            started_at=lock.started_at,
            discovery=str(tmp_path / "elsewhere" / "daemon-k.json"),
        )
    finally:
        lock.release()


def test_a_lock_held_where_an_earlier_tether_kept_it_refuses_the_start(tmp_path: Path) -> None:
    former = tmp_path / "run" / "daemon-k.lock"
    former.parent.mkdir()
    fd = os.open(former, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b'{"pid": 12, "state": "serving", "startedAt": 1.0}')
        path = tmp_path / "data" / "daemon.lock"
        with pytest.raises(AlreadyRunning) as refused:
            WorkspaceLock(path).acquire(former=former)
        assert refused.value.holder is not None
        assert refused.value.holder.pid == 12
        assert probe_lock(path) is None  # its own lock taken back at once
    finally:
        os.close(fd)
    lock = WorkspaceLock(path)
    lock.acquire(former=former)  # the earlier daemon gone, the start goes on
    lock.release()


# --- what a client does about a held lock -------------------------------------------------------


def record(state: str, pid: int = 42, age: float = 1.0) -> Held:
    return Held(msgspec.convert({"pid": pid, "state": state, "startedAt": NOW - age}, LockRecord))


@pytest.mark.parametrize("state", ["starting", "serving"])
def test_a_discovery_file_naming_the_holder_is_used(state: str) -> None:
    assert assess(record(state), info(42), now=NOW, waited=0) == info(42)


def test_a_discovery_file_naming_another_pid_is_a_dead_daemons() -> None:
    assert assess(record("starting"), info(7), now=NOW, waited=0) is None
    assert assess(record("serving"), info(7), now=NOW, waited=0) is None
    late = assess(record("serving"), info(7), now=NOW, waited=REWRITE_GRACE + 0.1)
    assert isinstance(late, str)
    assert "discovery file" in late


def test_a_young_starting_holder_is_waited_for_and_an_old_one_is_reported() -> None:
    assert assess(record("starting", age=1), None, now=NOW, waited=0) is None
    assert assess(record("starting", age=START_TIMEOUT - 1), None, now=NOW, waited=0) is None
    # However long this client has waited, what counts is how long the holder has been starting.
    stuck = assess(record("starting", age=START_TIMEOUT + 45), None, now=NOW, waited=0)
    assert stuck == "has been starting for 60 s without serving"


def test_a_serving_holder_gets_time_to_put_its_discovery_file_back() -> None:
    assert REWRITE_GRACE > DISCOVERY_CHECK_INTERVAL
    assert assess(record("serving", age=3600), None, now=NOW, waited=0) is None
    assert assess(record("serving"), None, now=NOW, waited=REWRITE_GRACE - 0.1) is None
    assert isinstance(assess(record("serving"), None, now=NOW, waited=REWRITE_GRACE), str)


def test_a_stopping_holder_is_waited_out_even_with_its_discovery_file() -> None:
    assert assess(record("stopping"), info(42), now=NOW, waited=0) is None
    assert assess(record("stopping", age=3600), None, now=NOW, waited=REWRITE_GRACE * 2) is None


def test_an_unreadable_record_trusts_the_file_or_waits_briefly() -> None:
    assert assess(Held(None), info(7), now=NOW, waited=0) == info(7)
    assert assess(Held(None), None, now=NOW, waited=0) is None
    assert isinstance(assess(Held(None), None, now=NOW, waited=REWRITE_GRACE), str)


# --- the daemon keeps its discovery file --------------------------------------------------------


async def test_the_discovery_file_is_put_back_when_deleted_or_replaced(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "run" / "daemon.json"
    ours = info(os.getpid())
    encoded = msgspec.json.encode(ours)
    told: list[Path] = []
    async with trio.open_nursery() as nursery:
        assert await nursery.start(partial(keep_discovery, lambda: path, ours, moved=told.append))
        assert path.read_bytes() == encoded
        assert told == [path]
        inode = path.stat().st_ino

        await trio.sleep(DISCOVERY_CHECK_INTERVAL * 3)
        assert path.stat().st_ino == inode  # untouched: left alone

        path.unlink()
        await trio.sleep(DISCOVERY_CHECK_INTERVAL * 1.5)
        assert path.read_bytes() == encoded

        path.write_bytes(msgspec.json.encode(info(7, port=1)))  # a stale one, in place
        await trio.sleep(DISCOVERY_CHECK_INTERVAL * 1.5)
        assert path.read_bytes() == encoded
        assert [p.name for p in path.parent.iterdir()] == [path.name]
        assert told == [path]  # put back in place: no move to record
        nursery.cancel_scope.cancel()


async def test_a_discovery_file_whose_runtime_dir_went_follows_the_rule_and_nothing_is_recreated(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    # /run/user/UID removed at logout: the daemon must not make it again (a `mkdir -p` would,
    # 0755, and clients would then refuse it), but write where the shared rule points now.
    runtime = tmp_path / "run" / "user" / "1000"
    runtime.mkdir(mode=0o700, parents=True)
    first = runtime / "tether" / "daemon.json"
    later = tmp_path / "tmp" / "runtime-1000" / "tether" / "daemon.json"
    rule = [first]
    ours = info(os.getpid())
    told: list[Path] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(keep_discovery, lambda: rule[0], ours, moved=told.append))
        assert (first.parent.stat().st_mode & 0o777) == 0o700
        shutil.rmtree(runtime)

        await trio.sleep(DISCOVERY_CHECK_INTERVAL * 2.5)
        assert not runtime.exists()  # the rule still names it: the write fails, and waits

        later.parent.parent.mkdir(mode=0o700, parents=True)
        rule[0] = later
        await trio.sleep(DISCOVERY_CHECK_INTERVAL * 1.5)
        assert later.read_bytes() == msgspec.json.encode(ours)
        assert (later.parent.stat().st_mode & 0o777) == 0o700
        assert told == [first, later]
        assert not runtime.exists()
        nursery.cancel_scope.cancel()
