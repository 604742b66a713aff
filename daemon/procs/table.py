"""The daemon owns every process tree a tool starts.

Rules:
- Every command runs in the user's shell (`$SHELL`, else `/bin/sh`) as `shell -c COMMAND`, in a
  new session (so in its own process group, whose id is the shell's pid), with stdin from
  `/dev/null`, stdout and stderr merged into one pipe, and an environment without variables
  that look secret (`command_env`). The shell is forked by the daemon's owner thread and dies
  with the daemon (`tether.daemon.procs.spawn`).
- Every group is recorded durably while it runs (`tether.daemon.procs.ownership`); the
  `ProcessTable`, when it starts serving, stops the groups a crashed daemon left behind.
- A tree is stopped as a group (`kill_tree`): SIGTERM (and SIGCONT, so stopped members see it)
  to the group, a grace period, then SIGKILL to whatever is left. A group is gone when none of
  its members is alive; zombies do not count (an orphaned zombie is its reaper's business).
  Waiting costs no /proc scan: the leader's exit is awaited, then `killpg(pgid, 0)` polled;
  /proc is read (in a worker thread) only for a group that lingers, to tell zombies apart.
- A tree ends with its leader: when the shell exits, members it left behind (`sleep 100 &`) are
  stopped too. Long-lived processes belong in the `ProcessTable` (background commands), which
  keeps them until they are killed, exit, or the table stops.
- Foreground commands (`run_to_completion`) are stopped on timeout and on cancellation; the
  cleanup is shielded, so a cancelled turn still waits (at most the grace period and a little
  more) until the tree is gone.
- The `ProcessTable` is a service (`serve`): when it is cancelled every tree it owns is
  stopped before `serve` returns.
- What this cannot catch: a process that leaves the group on purpose (`setsid`, a daemonising
  server) is no longer part of the tree.

Errors: `ProcessTableClosed` (the table is not serving: the daemon is starting or stopping);
`KeyError` for an unknown process id.
"""

import codecs
import fnmatch
import functools
import itertools
import logging
import math
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Literal, Protocol

import trio

from tether.daemon.procs.ownership import (
    TAG_VARIABLE,
    GroupRecord,
    OwnedGroups,
    new_tag,
    start_time,
)
from tether.daemon.procs.spawn import OWNER_THREAD, Child, Started, start_child
from tether.daemon.truncate import cut_marker
from tether.protocol.methods import ProcessInfo

log = logging.getLogger(__name__)

KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL."""
DRAIN_SECONDS = 1.0
"""How long to wait for the output pipe to reach its end once the tree is gone."""
POLL_SECONDS = 0.05
"""Longest pause between two checks whether a group is gone (a `killpg(pgid, 0)` each)."""
ZOMBIE_CHECK_SECONDS = 0.25
"""How often a group that seems to linger is read from /proc, in case only zombies are left."""
OUTPUT_INTERVAL = 0.05
"""A foreground command's output reaches `on_output` at most this often ..."""
BATCH_CHARS = 65536
"""... or as soon as this many characters are waiting."""
MAX_UNREAD = 200_000
"""Unread output kept per background process; older output is dropped (and counted)."""
MAX_FINISHED = 50
"""Finished background processes kept in the table (oldest dropped first)."""

SECRET_PATTERNS = (
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*APIKEY*",
    "*API_KEY*",
    "*PRIVATE_KEY*",
    "*_KEY",
    "*_KEY_ID",
    "*COOKIE*",
    "*_PAT",
    "*AUTH_HEADER*",
)
"""Environment variable names (matched upper-cased) that commands do not get."""

COMMAND_ENV = {
    "NO_COLOR": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
}
"""Set for every command: no colours, no pager, no prompt or editor waiting for a person."""


class ProcessTableClosed(Exception):
    """The process table is not serving (the daemon is starting or stopping)."""


# --- environment and shell --------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # Cached: every command filters the whole environment, a few hundred fnmatch calls.
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def command_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: `base` (default: the daemon's) without secret-looking
    variables, plus `COMMAND_ENV`."""
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if not is_secret_name(name)}
    env.update(COMMAND_ENV)
    return env


def user_shell(env: Mapping[str, str] | None = None) -> str:
    shell = (os.environ if env is None else env).get("SHELL", "")
    return shell if shell and Path(shell).is_file() else "/bin/sh"


# --- output -----------------------------------------------------------------------------------

_ESCAPE = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC
    r"|[ -/]*[0-OQ-WYZ\\`-~]"  # other short escapes (not the openers above)
    r")"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
_HOLD_BACK = 256


def strip_ansi(text: str) -> str:
    """`text` without terminal escape sequences and control characters (tabs, newlines and
    carriage returns stay)."""
    return _CONTROL.sub("", _ESCAPE.sub("", text)).replace("\x1b", "")


def collapse_carriage_returns(text: str) -> str:
    """Progress bars redraw a line with `\\r`; keep what each line finally showed."""
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line else line for line in lines)


class OutputDecoder:
    """Bytes from a pipe to clean text, chunk by chunk: UTF-8 decoded incrementally (invalid
    bytes replaced), escape sequences removed even when a chunk ends inside one."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes | bytearray) -> str:
        text = self._pending + self._utf8.decode(data)
        self._pending = ""
        escape = text.rfind("\x1b")
        if escape != -1 and len(text) - escape < _HOLD_BACK and _ESCAPE.match(text, escape) is None:
            # Every sequence has a definite end, so this one may be incomplete: decide when
            # the next chunk arrives.
            text, self._pending = text[:escape], text[escape:]
        return strip_ansi(text)

    def flush(self) -> str:
        text = self._pending + self._utf8.decode(b"", final=True)
        self._pending = ""
        return strip_ansi(text)


class OutputBuffer:
    """Keeps the first `head` and the last `tail` characters of a stream, and its length."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit = head
        self.tail_limit = tail
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.total = 0

    def append(self, text: str) -> None:
        self.total += len(text)
        room = self.head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        if self._tail_len > 2 * self.tail_limit:
            joined = "".join(self._tail)[-self.tail_limit :]
            self._tail = [joined]
            self._tail_len = len(joined)

    def render(self, head: int, tail: int) -> str:
        """All of the output if it has at most `head + tail` characters; otherwise exactly
        its first `head` and last `tail` characters (`head` and `tail` no larger than the
        buffer's) around a marker saying how many were cut. Progress-bar redraws collapsed."""
        head_text = "".join(self._head)
        tail_text = "".join(self._tail)
        if len(head_text) + len(tail_text) == self.total:  # nothing dropped
            full = head_text + tail_text
            if self.total <= head + tail:
                return collapse_carriage_returns(full)
            head_text, tail_text = full, full
        shown_tail = tail_text[len(tail_text) - tail :] if tail else ""
        return (
            collapse_carriage_returns(head_text[:head])
            + cut_marker(self.total - head - tail)
            + collapse_carriage_returns(shown_tail)
        )


# --- process groups ---------------------------------------------------------------------------

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


async def _leftovers(pgid: int) -> int:
    """How many live members a group has after its leader was collected: usually none, told
    by one system call; otherwise counted from /proc in a worker thread."""
    if not _group_exists(pgid):
        return 0
    return len(await trio.to_thread.run_sync(live_members, pgid))


async def _open(
    command: str, cwd: Path, env: Mapping[str, str], owned: OwnedGroups | None
) -> Child:
    """Start `command` in the user's shell on the owner thread, recording its group in
    `owned` before anything else can happen (so a crash right after still finds it)."""
    tag = new_tag()
    full_env = {**env, TAG_VARIABLE: tag}
    argv = [user_shell(env), "-c", command]

    def start() -> Started:
        started = start_child(argv, cwd=cwd, env=full_env)
        if owned is not None:
            pid = started[0].pid
            shown = command[:200]  # for log lines only
            owned.add(GroupRecord(pgid=pid, start=start_time(pid), tag=tag, command=shown))
        return started

    return Child(await OWNER_THREAD.run(start))


async def _pump(
    stream: trio.abc.ReceiveStream,
    decoder: OutputDecoder,
    sink: Callable[[str], None],
    eof: trio.Event,
    *,
    interval: float = 0.0,
) -> None:
    """Read the pipe to its end, passing clean text to `sink`: with an `interval`, text is
    gathered and passed on at most once per interval (or once `BATCH_CHARS` are waiting), so
    a command printing a line a millisecond does not become a thousand events a second."""
    pending: list[str] = []
    pending_len = 0
    flushed = trio.current_time()

    def flush() -> None:
        nonlocal pending_len, flushed
        if pending:
            sink("".join(pending))
            pending.clear()
            pending_len = 0
        flushed = trio.current_time()

    while True:
        deadline = flushed + interval if pending else math.inf
        with trio.move_on_at(deadline):
            data = await stream.receive_some(65536)
            if not data:
                break
            text = decoder.feed(data)
            if text:
                pending.append(text)
                pending_len += len(text)
            if pending_len < BATCH_CHARS and trio.current_time() < flushed + interval:
                continue
        flush()
    rest = decoder.flush()
    if rest:
        pending.append(rest)
    flush()
    eof.set()


async def _reap(process: Child, grace: float, owned: OwnedGroups | None) -> None:
    """Stop the tree, wait for the leader, close the pipe, forget the group. Shielded: runs
    to the end."""
    with trio.CancelScope(shield=True):
        await stop_child(process, grace)
        await process.stdout.aclose()
        if owned is not None:
            await OWNER_THREAD.run(partial(owned.remove, process.pid))


# --- foreground commands ----------------------------------------------------------------------


class Completed:
    """How a foreground command ended."""

    def __init__(
        self,
        exit_code: int | None,
        duration: float,
        output: OutputBuffer,
        timed_out: bool,
        leftovers: int,
    ) -> None:
        self.exit_code = exit_code
        self.duration = duration
        self.output = output
        self.timed_out = timed_out
        self.leftovers = leftovers
        """Members of the group still alive when the shell exited (they were stopped)."""


async def run_to_completion(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float,
    on_output: Callable[[str], None],
    head: int,
    tail: int,
    grace: float = KILL_GRACE,
    owned: OwnedGroups | None = None,
) -> Completed:
    """Run `command` in the user's shell in its own session and wait for it, passing cleaned
    output to `on_output` as it arrives (at most every `OUTPUT_INTERVAL` seconds) and keeping
    its first `head` and last `tail` characters. The group is recorded in `owned` while it
    runs (see `tether.daemon.procs.ownership`).

    After `time_limit` seconds the tree is stopped and the result says so. When the shell
    exits, members of its group that are still alive are stopped too. Cancellation stops the
    whole tree (shielded: it waits up to `grace` plus about a second) and then propagates.
    """
    started = trio.current_time()
    process = await _open(command, cwd, env, owned)
    buffer = OutputBuffer(head, tail)

    def sink(text: str) -> None:
        buffer.append(text)
        on_output(text)

    timed_out = False
    leftovers = 0
    try:
        async with trio.open_nursery() as nursery:
            eof = trio.Event()
            nursery.start_soon(
                partial(_pump, process.stdout, OutputDecoder(), sink, eof, interval=OUTPUT_INTERVAL)
            )
            with trio.move_on_after(time_limit) as timer:
                await process.wait()
            if timer.cancelled_caught:
                timed_out = True
                await kill_tree(process.pid, grace, process)
                await process.wait()
            else:
                leftovers = await _leftovers(process.pid)
                if leftovers:
                    await kill_tree(process.pid, grace)
            with trio.move_on_after(DRAIN_SECONDS):
                await eof.wait()
            nursery.cancel_scope.cancel()
    finally:
        await _reap(process, grace, owned)
    return Completed(
        exit_code=process.returncode,
        duration=trio.current_time() - started,
        output=buffer,
        timed_out=timed_out,
        leftovers=leftovers,
    )


# --- background commands ----------------------------------------------------------------------

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
        self._unread: list[str] = []
        self._unread_len = 0
        self._dropped = 0

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
    daemon left behind are stopped.
    """

    def __init__(self, *, grace: float = KILL_GRACE, record: Path | None = None) -> None:
        self.grace = grace
        self.owned = OwnedGroups(record)
        self._procs: dict[str, ManagedProcess] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled. Starts by stopping (in the background: SIGTERM, the grace
        period, SIGKILL) the groups a previous daemon recorded and left running.
        Cancellation stops every tree the table owns (each gets SIGTERM, the grace period,
        then SIGKILL, all at once) before this returns."""
        try:
            async with trio.open_nursery() as nursery:
                for record in await OWNER_THREAD.run(self.owned.take_over):
                    log.info("stopping process group %d left by a previous daemon", record.pgid)
                    nursery.start_soon(self._stop_leftover, record.pgid)
                self._nursery = nursery
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    self._nursery = None
            # Each supervisor stopped its own tree (shielded) as the nursery was cancelled.
        finally:
            with trio.CancelScope(shield=True):
                await OWNER_THREAD.run(self.owned.close)

    async def _stop_leftover(self, pgid: int) -> None:
        with trio.CancelScope(shield=True):
            await kill_tree(pgid, self.grace)
            await OWNER_THREAD.run(partial(self.owned.remove, pgid))

    async def start(
        self, command: str, cwd: Path, env: Mapping[str, str], session_id: str = ""
    ) -> ManagedProcess:
        """Start `command` in the user's shell, owned by the table; returns at once."""
        if self._nursery is None:
            raise ProcessTableClosed("background processes are not available right now")
        process = await _open(command, cwd, env, self.owned)
        nursery = self._serving()
        if nursery is None:  # the table stopped while the process was starting
            await _reap(process, self.grace, self.owned)
            raise ProcessTableClosed("background processes are not available right now")
        managed = ManagedProcess(f"p{next(self._ids)}", command, cwd, session_id, process)
        self._procs[managed.id] = managed
        nursery.start_soon(self._supervise, managed)
        self._forget_old()
        return managed

    def _serving(self) -> trio.Nursery | None:
        return self._nursery

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
                    _pump, process.stdout, OutputDecoder(), managed.append_output, eof
                )
                await process.wait()
                exited_by_itself = not managed.kill_requested
                # The tree ends with its leader.
                if await _leftovers(managed.pid):
                    await kill_tree(managed.pid, self.grace)
                with trio.move_on_after(DRAIN_SECONDS):
                    await eof.wait()
                nursery.cancel_scope.cancel()
        finally:
            await _reap(process, self.grace, self.owned)
            managed.exit_code = process.returncode
            managed.status = "exited" if exited_by_itself else "killed"
            managed.ended_at = time.time()
            managed.done.set()
