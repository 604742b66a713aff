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
from tether.daemon.ownership import TAG_VARIABLE, GroupRecord, OwnedGroups, boot_id, start_time
from tether.daemon.procs import command_env, run_to_completion


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
    body = {"version": 1, "boot_id": boot_id() if boot is None else boot, "groups": records}
    path.write_bytes(msgspec.json.encode(body))


def test_a_group_is_ours_by_its_tag_once_the_leader_is_gone(
    tmp_path: Path, orphaned_group: tuple[int, int]
) -> None:
    pgid, member = orphaned_group
    path = tmp_path / "processes.json"
    ours = GroupRecord(pgid=pgid, start=1, tag="abc", command="sleep")
    write_record(path, [ours])
    assert OwnedGroups(path).take_over() == [ours]
    # Still recorded until it has been stopped.
    assert b'"tag":"abc"' in path.read_bytes()

    write_record(path, [GroupRecord(pgid=pgid, start=1, tag="another")])
    assert OwnedGroups(path).take_over() == []
    assert b'"groups":[]' in path.read_bytes()
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


def test_the_record_is_owner_only_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "state" / "processes.json"
    owned = OwnedGroups(path)
    owned.add(GroupRecord(pgid=10, start=5, tag="t", command="make"))
    owned.add(GroupRecord(pgid=11, start=6, tag="u"))
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    owned.remove(10)
    assert [r.pgid for r in OwnedGroups(path).records()] == []  # a new table starts empty
    assert b'"pgid":11' in path.read_bytes()
    assert b'"pgid":10' not in path.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["processes.json"]


def test_garbage_in_the_record_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "processes.json"
    path.write_text("{not json")
    assert OwnedGroups(path).take_over() == []


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_command_gets_sigkill_as_its_death_signal(tmp_path: Path) -> None:
    # PR_GET_PDEATHSIG (2), read by the command itself (exec: the shell's own process).
    script = "import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); "
    script += "print(v.value)"
    with trio.fail_after(20):
        done = await run_to_completion(
            f"exec {sys.executable} -c '{script}'",
            cwd=tmp_path,
            env=command_env(),
            time_limit=10,
            on_output=lambda _text: None,
            head=100,
            tail=100,
        )
    assert done.exit_code == 0
    assert done.output.render(100, 100).strip() == str(int(signal.SIGKILL))
