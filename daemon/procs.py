"""The daemon owns every process tree a tool starts.

Rules:
- Every command runs in the user's shell (`$SHELL`, else `/bin/sh`) as `shell -c COMMAND`, in a
  new session (so in its own process group, whose id is the shell's pid), with stdin from
  `/dev/null`, stdout and stderr merged into one pipe, and an environment without variables
  that look secret (`command_env`).
- A tree is stopped as a group (`kill_tree`): SIGTERM (and SIGCONT, so stopped members see it)
  to the group, a grace period, then SIGKILL to whatever is left. A group is gone when none of
  its members is alive; zombies do not count (an orphaned zombie is its reaper's business).
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
import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import trio

from tether.daemon.truncate import cut_marker
from tether.protocol.methods import ProcessInfo

KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL."""
DRAIN_SECONDS = 1.0
"""How long to wait for the output pipe to reach its end once the tree is gone."""
POLL_SECONDS = 0.05
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


def is_secret_name(name: str) -> bool:
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


def live_members(pgid: int) -> list[int]:
    """The pids of the group's members that are alive (not zombies).

    On Linux this reads /proc; elsewhere it can only tell whether the group has any member,
    zombies included."""
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
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


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Only zombies left (or the pgid was reused by someone else's group): nothing to do.
        return False
    return True


async def _wait_group_gone(pgid: int, seconds: float) -> bool:
    with trio.move_on_after(seconds):
        # Nothing signals the end of processes that are not our children: poll /proc.
        while live_members(pgid):  # noqa: ASYNC110
            await trio.sleep(POLL_SECONDS)
        return True
    return False


async def kill_tree(pgid: int, grace: float = KILL_GRACE) -> bool:
    """Stop every member of process group `pgid`: SIGTERM, up to `grace` seconds for them to
    exit, then SIGKILL. Returns whether any member was alive. Waits (about a second at most)
    until the group is gone after SIGKILL.

    Cancellation: the waiting is cancellable; callers that must finish the job (cleanup after a
    cancelled turn) call it inside a shielded cancel scope.
    """
    if not live_members(pgid):
        return False
    if not _signal_group(pgid, signal.SIGTERM):
        return False
    _signal_group(pgid, signal.SIGCONT)
    if await _wait_group_gone(pgid, grace):
        return True
    _signal_group(pgid, signal.SIGKILL)
    await _wait_group_gone(pgid, 1.0)
    return True


async def _open(command: str, cwd: Path, env: Mapping[str, str]) -> trio.Process:
    return await trio.lowlevel.open_process(
        [user_shell(env), "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )


async def _pump(
    stream: trio.abc.ReceiveStream,
    decoder: OutputDecoder,
    sink: Callable[[str], None],
    eof: trio.Event,
) -> None:
    while True:
        data = await stream.receive_some(65536)
        if not data:
            break
        text = decoder.feed(data)
        if text:
            sink(text)
    rest = decoder.flush()
    if rest:
        sink(rest)
    eof.set()


async def _reap(process: trio.Process, grace: float) -> None:
    """Stop the tree, wait for the leader, close the pipe. Shielded: runs to the end."""
    with trio.CancelScope(shield=True):
        await kill_tree(process.pid, grace)
        with trio.move_on_after(grace + 1.0):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


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
) -> Completed:
    """Run `command` in the user's shell in its own session and wait for it, passing cleaned
    output to `on_output` as it arrives and keeping its first `head` and last `tail` characters.

    After `time_limit` seconds the tree is stopped and the result says so. When the shell
    exits, members of its group that are still alive are stopped too. Cancellation stops the
    whole tree (shielded: it waits up to `grace` plus about a second) and then propagates.
    """
    started = trio.current_time()
    process = await _open(command, cwd, env)
    assert process.stdout is not None
    buffer = OutputBuffer(head, tail)

    def sink(text: str) -> None:
        buffer.append(text)
        on_output(text)

    timed_out = False
    leftovers = 0
    try:
        async with trio.open_nursery() as nursery:
            eof = trio.Event()
            nursery.start_soon(_pump, process.stdout, OutputDecoder(), sink, eof)
            with trio.move_on_after(time_limit) as timer:
                await process.wait()
            if timer.cancelled_caught:
                timed_out = True
                await kill_tree(process.pid, grace)
                await process.wait()
            else:
                leftovers = len(live_members(process.pid))
                if leftovers:
                    await kill_tree(process.pid, grace)
            with trio.move_on_after(DRAIN_SECONDS):
                await eof.wait()
            nursery.cancel_scope.cancel()
    finally:
        await _reap(process, grace)
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

    def __init__(
        self, id: str, command: str, cwd: Path, session_id: str, process: trio.Process
    ) -> None:
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
    """

    def __init__(self, *, grace: float = KILL_GRACE) -> None:
        self.grace = grace
        self._procs: dict[str, ManagedProcess] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled. Cancellation stops every tree the table owns (each gets SIGTERM,
        the grace period, then SIGKILL, all at once) before this returns."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
        # Each supervisor stopped its own tree (shielded) as the nursery was cancelled.

    async def start(
        self, command: str, cwd: Path, env: Mapping[str, str], session_id: str = ""
    ) -> ManagedProcess:
        """Start `command` in the user's shell, owned by the table; returns at once."""
        if self._nursery is None:
            raise ProcessTableClosed("background processes are not available right now")
        process = await _open(command, cwd, env)
        nursery = self._serving()
        if nursery is None:  # the table stopped while the process was starting
            await _reap(process, self.grace)
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
        await kill_tree(managed.pid, self.grace)
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
        assert process.stdout is not None
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
                await kill_tree(managed.pid, self.grace)
                with trio.move_on_after(DRAIN_SECONDS):
                    await eof.wait()
                nursery.cancel_scope.cancel()
        finally:
            await _reap(process, self.grace)
            managed.exit_code = process.returncode
            managed.status = "exited" if exited_by_itself else "killed"
            managed.ended_at = time.time()
            managed.done.set()
