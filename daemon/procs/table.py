"""The table of background processes: commands that outlive the turn that started them.

Rules:
- A background command runs in a shell (bash by default) in a group of its own, recorded
  while it runs (`tether.daemon.procs.shell`); it stays in the table until it is killed,
  exits, or the table stops. A tree ends with its leader: when the shell exits, members it
  left behind are stopped.
- Its output is kept until read (`read_new_output`), at most `MAX_UNREAD` characters; older
  unread output is dropped and counted. At most `MAX_FINISHED` finished processes are kept.
- The `ProcessTable` is a service (`serve`): when it starts, it stops the groups a crashed
  daemon left behind (`tether.daemon.procs.ownership`); when it is cancelled every tree it owns
  is stopped before `serve` returns.

Errors: `ProcessTableClosed` (the table is not serving: the daemon is starting or stopping);
`KeyError` for an unknown process id.
"""

import itertools
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Literal

import trio

from tether.daemon.logs.log import get_logger
from tether.daemon.nursery import LentNursery
from tether.daemon.procs.groups import KILL_GRACE, count_live_members, kill_tree
from tether.daemon.procs.output import OutputDecoder, pump
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.procs.shell import DRAIN_SECONDS, open_command, reap
from tether.daemon.procs.spawn import OWNER_THREAD, Child
from tether.daemon.procs.watchdog import Watchdog
from tether.protocol.methods import ProcessInfo

log = get_logger(__name__)

MAX_UNREAD = 200_000
MAX_TAIL = 16_000
"""Characters of a process's latest output kept for clients (`process/output`), whether or not
the model has read them."""
"""Unread output kept per background process; older output is dropped (and counted)."""
MAX_FINISHED = 50
"""Finished background processes kept in the table (oldest dropped first)."""


class ProcessTableClosed(Exception):
    """The process table is not serving (the daemon is starting or stopping)."""


Status = Literal["running", "exited", "killed"]


class ManagedProcess:
    """A background command the daemon owns."""

    def __init__(self, id: str, command: str, cwd: Path, session_id: str, process: Child) -> None:
        self.id = id
        self.command = command
        self.cwd = cwd
        self.session_id = session_id
        self.process = process
        self.pid = process.pid
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.status: Status = "running"
        self.exit_code: int | None = None
        self.done = trio.Event()
        """Set once the tree is gone and the status is final."""
        self.kill_requested = False
        self.sandbox: Sandbox | None = None
        """The sandbox it runs in (None: none)."""
        self._unread: list[str] = []
        self._unread_len = 0
        self._dropped = 0
        self._tail = ""
        self._total = 0

    def info(self) -> ProcessInfo:
        return ProcessInfo(
            id=self.id,
            command=self.command,
            cwd=str(self.cwd),
            pid=self.pid,
            session_id=self.session_id,
            started_at=self.started_at,
            status=self.status,
            exit_code=self.exit_code,
        )

    def append_output(self, text: str) -> None:
        self._total += len(text)
        self._tail = (self._tail + text)[-MAX_TAIL:]
        self._unread.append(text)
        self._unread_len += len(text)
        while self._unread_len - len(self._unread[0]) >= MAX_UNREAD:
            dropped = self._unread.pop(0)
            self._unread_len -= len(dropped)
            self._dropped += len(dropped)
        if self._unread_len > MAX_UNREAD:
            extra = self._unread_len - MAX_UNREAD
            self._unread[0] = self._unread[0][extra:]
            self._unread_len -= extra
            self._dropped += extra

    def tail(self, max_chars: int) -> tuple[str, bool]:
        """The last `max_chars` characters it printed (at most `MAX_TAIL`), read or not, and
        whether there was more before them. Reading the tail leaves what the model is yet to
        read (`read_new_output`) alone."""
        text = self._tail[-max_chars:] if max_chars > 0 else ""
        return text, self._total > len(text)

    def read_new_output(self) -> str:
        """The output since the last call (older unread output beyond 200,000 characters was
        dropped; a marker says how much)."""
        text = "".join(self._unread)
        if self._dropped:
            text = f"[… {self._dropped:,} earlier characters dropped …]\n{text}"
        self._unread.clear()
        self._unread_len = 0
        self._dropped = 0
        return text


class ProcessTable:
    """Background processes: started by `run_command` with `background: true`, they outlive the
    turn and end when killed, when they exit, or when the table stops (with the daemon).

    Register it in the tool services under `"processes"` and run `serve` in the daemon's
    nursery (`await nursery.start(table.serve)`).

    It also keeps the daemon's record of the groups it owns (`owned`, written to `record`;
    foreground commands are recorded there too): when it starts serving, the groups a crashed
    daemon left behind are stopped. With a record, it runs a `Watchdog` while it serves, which
    kills the recorded groups when the daemon dies.
    """

    def __init__(self, *, grace: float = KILL_GRACE, record: Path | None = None) -> None:
        self.grace = grace
        self.owned = OwnedGroups(record)
        self.watchdog = Watchdog(self.owned) if record is not None else None
        """Kills the recorded groups when the daemon dies (with a record only)."""
        self._procs: dict[str, ManagedProcess] = {}
        self._ids = itertools.count(1)
        self._lent = LentNursery()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled. Starts the watchdog (with a record) and stops (in the
        background: SIGTERM, the grace period, SIGKILL) the groups a previous daemon recorded
        and left running.
        Cancellation stops every tree the table owns (each gets SIGTERM, the grace period,
        then SIGKILL, all at once) before this returns."""
        try:
            async with trio.open_nursery() as nursery:
                if self.watchdog is not None:
                    await nursery.start(self.watchdog.serve)
                for record in await OWNER_THREAD.run(self.owned.take_over):
                    log.info("stopping a process group left by a previous daemon", pgid=record.pgid)
                    nursery.start_soon(self._stop_leftover, record.pgid)
                await self._lent.lend(nursery, task_status)
            # Each supervisor stopped its own tree (shielded) as the nursery was cancelled.
        finally:
            with trio.CancelScope(shield=True):
                if self.watchdog is not None:
                    await self.watchdog.release()
                await OWNER_THREAD.run(self.owned.close)

    async def _stop_leftover(self, pgid: int) -> None:
        with trio.CancelScope(shield=True):
            await kill_tree(pgid, self.grace)
            await OWNER_THREAD.run(partial(self.owned.remove, pgid))

    async def start(
        self,
        command: str,
        cwd: Path,
        env: Mapping[str, str],
        session_id: str = "",
        sandbox: Sandbox | None = None,
        shell: str | None = None,
    ) -> ManagedProcess:
        """Start `command` in `shell` (default: bash; see `tether.daemon.procs.shell`), in
        `sandbox` when given (`SandboxUnavailable` when it cannot be made, and nothing
        starts), owned by the table; returns at once."""
        if self._lent.nursery is None:
            raise ProcessTableClosed("background processes are not available right now")
        process = await open_command(command, cwd, env, self.owned, sandbox=sandbox, shell=shell)
        nursery = self._serving()
        if nursery is None:  # the table stopped while the process was starting
            await reap(process, self.grace, self.owned)
            raise ProcessTableClosed("background processes are not available right now")
        managed = ManagedProcess(f"p{next(self._ids)}", command, cwd, session_id, process)
        managed.sandbox = sandbox
        self._procs[managed.id] = managed
        nursery.start_soon(self._supervise, managed)
        self._forget_old()
        return managed

    def _serving(self) -> trio.Nursery | None:
        return self._lent.nursery

    def list(self) -> list[ProcessInfo]:
        return [managed.info() for managed in self._procs.values()]

    def get(self, process_id: str) -> ManagedProcess:
        """The process with this id (KeyError if unknown)."""
        return self._procs[process_id]

    def read_new_output(self, process_id: str) -> str:
        return self._procs[process_id].read_new_output()

    async def kill(self, process_id: str) -> None:
        """Stop the process tree (SIGTERM, grace, SIGKILL) and wait until it is gone; a
        process that already ended is left as it is. KeyError if the id is unknown.
        Cancellation stops the waiting, not the stopping: the supervisor finishes it."""
        managed = self._procs[process_id]
        if managed.done.is_set():
            return
        managed.kill_requested = True
        await kill_tree(managed.pid, self.grace, managed.process)
        await managed.done.wait()

    async def shutdown(self) -> None:
        """Stop every running tree at once and wait until they are gone; the table keeps
        serving (nothing new is refused)."""
        async with trio.open_nursery() as nursery:
            for managed in list(self._procs.values()):
                if not managed.done.is_set():
                    nursery.start_soon(self.kill, managed.id)

    def _forget_old(self) -> None:
        finished = [m for m in self._procs.values() if m.done.is_set()]
        for managed in finished[: max(0, len(finished) - MAX_FINISHED)]:
            del self._procs[managed.id]

    async def _supervise(self, managed: ManagedProcess) -> None:
        process = managed.process
        exited_by_itself = False
        try:
            async with trio.open_nursery() as nursery:
                eof = trio.Event()
                nursery.start_soon(
                    pump, process.stdout, OutputDecoder(), managed.append_output, eof
                )
                await process.wait()
                exited_by_itself = not managed.kill_requested
                # The tree ends with its leader.
                if await count_live_members(managed.pid):
                    await kill_tree(managed.pid, self.grace)
                with trio.move_on_after(DRAIN_SECONDS):
                    await eof.wait()
                nursery.cancel_scope.cancel()
        finally:
            await reap(process, self.grace, self.owned)
            managed.exit_code = process.returncode
            managed.status = "exited" if exited_by_itself else "killed"
            managed.ended_at = time.time()
            managed.done.set()
