"""Stopping a process group and waiting until it is gone.

Rules:
- A tree is stopped as a group (`kill_tree`): SIGTERM (and SIGCONT, so stopped members see it)
  to the group, a grace period, then SIGKILL to whatever is left.
- A group is gone when none of its members is alive; zombies do not count (an orphaned zombie
  is its reaper's business).
- Waiting costs no /proc scan: the leader's exit is awaited (when it is the daemon's child),
  then `killpg(pgid, 0)` polled; /proc is read (in a worker thread) only for a group that
  lingers, to tell zombies apart.
- Members we may not signal (another user's) count as absent: there is nothing we can stop.
- The waiting is cancellable; a caller that must finish the job (cleanup after a cancelled
  turn) calls it inside a shielded cancel scope.
"""

import os
import signal
from pathlib import Path
from typing import Protocol

import trio

KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL."""
POLL_SECONDS = 0.05
"""Longest pause between two checks whether a group is gone (a `killpg(pgid, 0)` each)."""
ZOMBIE_CHECK_SECONDS = 0.25
"""How often a group that seems to linger is read from /proc, in case only zombies are left."""

_PROC = Path("/proc")


class Leader(Protocol):
    """A group's leader when it is the daemon's child (`Child`, `trio.Process`)."""

    async def wait(self) -> int: ...


class OwnChild(Leader, Protocol):
    """A child the daemon started as the leader of a group of its own (`Child`,
    `trio.Process`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def kill(self) -> None: ...


def live_members(pgid: int) -> list[int]:
    """The pids of the group's members that are alive (not zombies).

    On Linux this reads every /proc/PID/stat (milliseconds): call it rarely, from a worker
    thread. Elsewhere it can only tell whether the group has any member, zombies included."""
    if not _PROC.is_dir():
        return [pgid] if _group_exists(pgid) else []
    members: list[int] = []
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                raw = stat.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _group_exists(pgid: int) -> bool:
    """Whether the group has a member we may signal (zombies count): one system call."""
    return _signal_group(pgid, 0)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Members we may not signal (another user's): nothing we can stop.
        return False
    return True


async def wait_group_gone(pgid: int, seconds: float, leader: Leader | None = None) -> bool:
    """Wait up to `seconds` until group `pgid` has no live member; whether it got there.

    With the `leader` (the daemon's child), its exit is awaited (no polling) and collected.
    Then nothing signals the end of processes that are not our children: the group is polled
    with `killpg(pgid, 0)`, from every few milliseconds to every `POLL_SECONDS`. A zombie
    member keeps a group visible to that test until its parent collects it, so every
    `ZOMBIE_CHECK_SECONDS` the members are read from /proc in a worker thread, and a group
    of zombies only counts as gone."""
    with trio.move_on_after(seconds):
        if leader is not None:
            await leader.wait()
        delay = 0.002
        waited = 0.0
        next_check = ZOMBIE_CHECK_SECONDS
        while _group_exists(pgid):
            await trio.sleep(delay)
            waited += delay
            delay = min(delay * 2, POLL_SECONDS)
            if waited >= next_check:
                next_check += ZOMBIE_CHECK_SECONDS
                if not await trio.to_thread.run_sync(live_members, pgid):
                    return True
        return True
    return False


async def kill_tree(pgid: int, grace: float = KILL_GRACE, leader: Leader | None = None) -> bool:
    """Stop every member of process group `pgid`: SIGTERM, up to `grace` seconds for them to
    exit, then SIGKILL. Returns whether the group had any member (an exited leader not yet
    collected counts). Waits (about a second at most) until the group is gone after SIGKILL.
    Pass the group's `leader` when it is the daemon's child, so that it is collected.

    Cancellation: the waiting is cancellable; callers that must finish the job (cleanup after a
    cancelled turn) call it inside a shielded cancel scope.
    """
    if not _signal_group(pgid, signal.SIGTERM):
        return False
    _signal_group(pgid, signal.SIGCONT)
    if await wait_group_gone(pgid, grace, leader):
        return True
    _signal_group(pgid, signal.SIGKILL)
    await wait_group_gone(pgid, 1.0, leader)
    return True


async def stop_child(process: OwnChild, grace: float) -> None:
    """Stop the group `process` leads (`kill_tree`) and collect `process` itself, killing it
    if it outlives the group by a second. Cancellable: call it shielded to finish the job."""
    await kill_tree(process.pid, grace, process)
    with trio.move_on_after(grace + 1.0):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


async def count_live_members(pgid: int) -> int:
    """How many live members a group has after its leader was collected: usually none, told
    by one system call; otherwise counted from /proc in a worker thread."""
    if not _group_exists(pgid):
        return 0
    return len(await trio.to_thread.run_sync(live_members, pgid))
