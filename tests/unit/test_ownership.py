"""The durable record of owned process groups and the death signal, with real processes and
real files."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio

from tests.support import alive
from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import run_to_completion
from tether.daemon.procs.ownership import (
    COMPACT_AFTER,
    TAG_VARIABLE,
    GroupRecord,
    OwnedGroups,
    RecordLine,
    boot_id,
    start_time,
)
from tether.daemon.procs.spawn import die_with

READ_DEATH_SIGNAL = (
    "import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)"
)
"""Prints the process's PR_GET_PDEATHSIG (2)."""


@pytest.fixture
def orphaned_group() -> Iterator[tuple[int, int]]:
    """A group whose leader has exited, leaving a member (tagged "abc") behind: what a
    crashed daemon leaves. Yields (pgid, the member's pid)."""
    env = {**os.environ, TAG_VARIABLE: "abc"}
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 >/dev/null & echo $!"],
        start_new_session=True,
        env=env,
        stdout=subprocess.PIPE,
    )
    out, _ = leader.communicate(timeout=10)
    member = int(out)
    try:
        yield leader.pid, member
    finally:
        os.kill(member, signal.SIGKILL)


def write_record(path: Path, records: list[GroupRecord], boot: str | None = None) -> None:
    lines = [RecordLine(add=r, boot_id=boot_id() if boot is None else boot) for r in records]
    path.write_bytes(b"".join(msgspec.json.encode(line) + b"\n" for line in lines))


def recorded(path: Path) -> list[int]:
    """The pgids the file records, as a new daemon reads them (without taking over)."""
    return sorted(OwnedGroups(path).read())


def test_a_group_is_ours_by_its_tag_once_the_leader_is_gone(
    tmp_path: Path, orphaned_group: tuple[int, int]
) -> None:
    pgid, member = orphaned_group
    path = tmp_path / "processes.json"
    ours = GroupRecord(pgid=pgid, start=1, tag="abc", command="sleep")
    write_record(path, [ours])
    assert OwnedGroups(path).take_over() == [ours]
    # Still recorded until it has been stopped.
    assert recorded(path) == [pgid]

    write_record(path, [GroupRecord(pgid=pgid, start=1, tag="another")])
    assert OwnedGroups(path).take_over() == []
    assert recorded(path) == []
    assert alive(member)


def test_a_leader_is_ours_only_with_its_start_time(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        started = start_time(proc.pid)
        assert started > 0
        path = tmp_path / "processes.json"
        reused = GroupRecord(pgid=proc.pid, start=started + 1, tag="x")
        write_record(path, [reused])
        assert OwnedGroups(path).take_over() == []
        same = GroupRecord(pgid=proc.pid, start=started, tag="x")
        write_record(path, [same])
        assert OwnedGroups(path).take_over() == [same]
        # A record from before a reboot names nothing that still runs.
        write_record(path, [same], boot="another-boot")
        assert OwnedGroups(path).take_over() == []
    finally:
        proc.kill()
        proc.wait()


def test_the_record_is_owner_only_appended_to_and_compacted(tmp_path: Path) -> None:
    path = tmp_path / "state" / "processes.json"
    owned = OwnedGroups(path)
    owned.add(GroupRecord(pgid=10, start=5, tag="t", command="make"))
    owned.add(GroupRecord(pgid=11, start=6, tag="u"))
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    owned.remove(10)
    assert recorded(path) == [11]
    assert len(path.read_bytes().splitlines()) == 3
    for pgid in range(100, 100 + COMPACT_AFTER):
        owned.add(GroupRecord(pgid=pgid, start=1, tag="v"))
        owned.remove(pgid)
    # Rewritten whole once it grew long: only what is still owned.
    assert recorded(path) == [11]
    assert len(path.read_bytes().splitlines()) < COMPACT_AFTER
    owned.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["processes.json"]


def test_a_torn_last_line_loses_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "processes.json"
    write_record(path, [GroupRecord(pgid=7, start=1, tag="a")])
    with path.open("ab") as file:
        file.write(b'{"add":{"pgid":8,"st')
    assert recorded(path) == [7]
    owned = OwnedGroups(path)
    owned.add(GroupRecord(pgid=9, start=1, tag="b"))
    owned.close()
    assert recorded(path) == [7, 9]


def test_garbage_in_the_record_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "processes.json"
    path.write_text("{not json\n[]\n")
    assert OwnedGroups(path).take_over() == []
    assert path.read_bytes() == b""


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_the_preexec_fallback_sets_the_death_signal() -> None:
    preexec = die_with(os.getpid())
    assert preexec is not None
    ran = subprocess.run(
        [sys.executable, "-c", READ_DEATH_SIGNAL],
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert ran.stdout.strip() == str(int(signal.SIGKILL))


async def death_signal_of_a_command(cwd: Path, owned: OwnedGroups | None = None) -> str:
    """The death signal a command started as the daemon starts them has, as it reads it
    itself (`exec`: the shell's own process)."""
    with trio.fail_after(30):
        done = await run_to_completion(
            f"exec {sys.executable} -c '{READ_DEATH_SIGNAL}'",
            cwd=cwd,
            env=command_env(),
            time_limit=30,
            on_output=lambda _text: None,
            head=100,
            tail=100,
            owned=owned,
        )
    assert done.exit_code == 0
    return done.output.render(100, 100).strip()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_command_gets_sigkill_as_its_death_signal(tmp_path: Path) -> None:
    assert await death_signal_of_a_command(tmp_path) == str(int(signal.SIGKILL))
