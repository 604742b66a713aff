"""A small process that outlives the daemon only to kill the process groups it owned.

Rules:
- The daemon runs one (`Watchdog`, started by the `ProcessTable`): `python -P -m
  tether.daemon.procs.watchdog RECORD`, in a session of its own (a signal to the daemon's
  group does not reach it), its stdin a pipe whose other end only the daemon holds (not
  inherited by anything the daemon starts). When the daemon ends, however it ends (SIGKILL
  included), the kernel closes that end; the watchdog reads the end of its stdin, reads the
  record (`tether.daemon.procs.ownership`) and sends SIGKILL to every group the record proves
  is still the daemon's: the whole group, not only its leader.
- It writes `READY` to its stdout once it watches. From then until its stdout reaches its end
  (it died), the record is `guarded`: commands start without a death signal of their own
  (`tether.daemon.procs.spawn`), which saves an exec and a thread hop per command. When it
  dies, new commands get the death signal again and another watchdog is started; after
  `MAX_FAILED_STARTS` in a row that never watched, none is.
- A daemon that stops cleanly, with no group left that lacks a death signal, sends `RELEASE`:
  the watchdog exits without killing anything. If such groups are left, it is not released: it
  kills them when the daemon ends.
- It only reads the record; a daemon started after a crash takes the record over as before
  (and finds the groups the watchdog killed gone).
- What it cannot catch: a command started in the instant between its fork and its record
  (microseconds) when the daemon dies then, and everything when the watchdog itself is killed
  with the daemon (then the next daemon stops what is left, as after a crash of the machine's
  user session).
"""

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.procs.ownership import OwnedGroups, confirmed

log = get_logger(__name__)

READY = b"r"
"""Written by the watchdog once it watches."""
RELEASE = b"q"
"""Sent by a daemon stopping cleanly: exit without killing anything."""
RESTART_SECONDS = 1.0
"""Pause before a watchdog that died is replaced."""
MAX_FAILED_STARTS = 3
"""Watchdogs in a row that end before they watch, after which none is started again."""
COMMAND = (sys.executable, "-P", "-m", "tether.daemon.procs.watchdog")
RELEASE_SECONDS = 5.0
"""How long a released watchdog gets to exit before it is killed."""


def kill_owned(record: Path) -> list[int]:
    """SIGKILL every group `record` proves is still owned (see `confirmed`); returns their
    pgids."""
    killed: list[int] = []
    for group in confirmed(OwnedGroups(record).read()):
        try:
            os.killpg(group.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(group.pgid)
    return killed


def wait_for_release(fd: int) -> bool:
    """Read `fd` to its end; whether `RELEASE` came first."""
    while True:
        data = os.read(fd, 64)
        if not data:
            return False
        if RELEASE in data:
            return True


def main(args: list[str] | None = None) -> int:
    """The watchdog process: `python -P -m tether.daemon.procs.watchdog RECORD`."""
    argv = sys.argv[1:] if args is None else args
    if len(argv) != 1:
        print("usage: python -P -m tether.daemon.procs.watchdog RECORD", file=sys.stderr)
        return 2
    record = Path(argv[0])
    # A terminal's signals are not for it: it acts when the daemon is gone, not before.
    for number in (signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # a daemon dead before this still has its groups killed
        os.write(1, READY)
    if not wait_for_release(0):
        kill_owned(record)
    return 0


def _watchdog_env() -> dict[str, str]:
    """Only what Python needs to find tether: the watchdog carries none of the variables a
    command gets (nothing to leak, and nothing that makes it look like one of the commands)."""
    return {name: os.environ[name] for name in ("PATH", "PYTHONPATH") if name in os.environ}


class Watchdog:
    """The daemon's side of the watchdog for `owned` (whose `path` must be set)."""

    def __init__(
        self,
        owned: OwnedGroups,
        command: Sequence[str] = COMMAND,
        restart_seconds: float = RESTART_SECONDS,
    ) -> None:
        """`command`: what runs the watchdog, the record's path appended; `restart_seconds`:
        the pause before one that ended is replaced."""
        assert owned.path is not None
        self.owned = owned
        self.record = owned.path
        self.command = [*command, str(owned.path)]
        self.restart_seconds = restart_seconds
        self._process: trio.Process | None = None
        self._guard_changed = trio.Event()

    @property
    def pid(self) -> int | None:
        """The running watchdog's pid, if one runs."""
        return None if self._process is None else self._process.pid

    async def wait_guarded(self, guarded: bool = True) -> None:
        """Wait until `owned.guarded` is `guarded` (at once when it is already). Cancelling
        it only stops the wait."""
        while self.owned.guarded != guarded:
            await self._guard_changed.wait()

    def _guard(self, guarded: bool) -> None:
        self.owned.guarded = guarded
        self._guard_changed.set()
        self._guard_changed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a watchdog running, `owned.guarded` while it watches, until cancelled (which
        leaves it running: `release` ends it). Gives up, leaving every command its death
        signal, when one cannot be started or `MAX_FAILED_STARTS` in a row end before they
        watch."""
        task_status.started()
        failed = 0
        while failed < MAX_FAILED_STARTS:
            try:
                process = await trio.lowlevel.open_process(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd="/",
                    env=_watchdog_env(),
                    start_new_session=True,
                )
            except OSError as exc:
                log.warning("no watchdog: commands keep their death signal", error=exc)
                return
            self._process = process
            assert process.stdout is not None
            if await process.stdout.receive_some(len(READY)) == READY:
                failed = 0
                self._guard(True)
                while await process.stdout.receive_some(64):
                    pass
            else:
                failed += 1
            self._guard(False)
            log.warning("the watchdog ended", pid=process.pid, failed_starts=failed)
            await self._discard(process)
            await trio.sleep(self.restart_seconds)
        log.warning("no watchdog: commands keep their death signal", failed_starts=failed)

    async def release(self) -> None:
        """Stop guarding; end the watchdog without it killing anything, unless groups without
        a death signal are still recorded (then it keeps watching, to kill them when the
        daemon ends). Call it once `serve` is done. Shielded: runs to the end."""
        self._guard(False)
        process = self._process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            if left := self.owned.unsignalled():
                log.warning("process groups without a death signal are left", groups=left)
                return
            assert process.stdin is not None
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await process.stdin.send_all(RELEASE)
            await self._discard(process)

    async def _discard(self, process: trio.Process) -> None:
        with trio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with trio.move_on_after(RELEASE_SECONDS):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()
            if self._process is process:
                self._process = None


if __name__ == "__main__":
    sys.exit(main())
