"""Starting the processes the daemon owns so that they die with it where Linux allows.

Rules:
- A child is started with `PR_SET_PDEATHSIG = SIGKILL` (Linux): when the daemon dies, even by
  SIGKILL, the kernel kills the child. Only the direct child: its own children do not inherit
  it, which is why the daemon also records every group it owns (`tether.daemon.procs.ownership`).
- Linux sends the death signal when the *thread* that forked the child ends, not the process.
  trio runs `subprocess.Popen` in its worker threads, which exit after a few idle seconds and
  would take long-running commands with them. So every child is forked by one thread that
  lives as long as the daemon (`OwnerThread`), and the daemon's other blocking work for its
  children (the ownership record) runs there too, in order.
- How the signal is set: by `setpriv --pdeathsig KILL` (util-linux) in front of the command
  when /usr/bin or /bin has one that works, because a `preexec_fn` makes Python fork instead
  of vfork, and forking the daemon costs ~10 ms (its page tables are copied) against ~1-2 ms
  for the extra exec. Without setpriv, a ctypes `prctl` in `preexec_fn` does it; that child
  also checks that its parent is still the daemon (which may have died before the prctl).
- Without the signal (`death_signal=False`): for a group a watchdog will kill when the daemon
  dies (`tether.daemon.procs.watchdog`). Nothing ties the child to a thread then, so it may be
  started from any thread, the trio thread included: Python vforks, and the caller is blocked
  only until the child's exec (a fraction of a millisecond).

`Child` is the small part of `trio.Process` the daemon needs (pid, wait, kill, the output
pipe), over a `subprocess.Popen` made on that thread.
"""

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, TypeVar

import trio

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _load_prctl()
_setpriv: list[list[str]] = []
"""The setpriv prefix, once probed ([[]] when there is none that works)."""


def _death_signal_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` if a working one is installed, else []. Probed once, by
    running it (blocking)."""
    if not _setpriv:
        found: list[str] = []
        for folder in ("/usr/bin", "/bin"):
            candidate = Path(folder) / "setpriv"
            if sys.platform == "linux" and candidate.is_file():
                probe = [str(candidate), "--pdeathsig", "KILL", "--", "/bin/sh", "-c", "exit 0"]
                try:
                    ran = subprocess.run(probe, capture_output=True, timeout=10, check=False)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if ran.returncode == 0:
                    found = probe[:4]
                    break
        _setpriv.append(found)
    return _setpriv[0]


def die_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGKILL when its parent thread ends, or None
    where that is not available. Runs in the forked child (after `setsid`), so it only makes
    a system call and compares two numbers."""
    prctl = _prctl
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the daemon died before the prctl took effect
            os._exit(1)

    return preexec


class OwnerThread:
    """One long-lived thread that forks the daemon's children and does the blocking work that
    goes with them, one job at a time, in the order submitted."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()

    async def run(self, job: Callable[[], T]) -> T:
        """Run `job` on the thread and return its result (or raise its exception).

        Not cancellable: a job that forks must hand its child over, so cancellation waits for
        the job (they are short) and is delivered at the next checkpoint."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="tether-process-owner", daemon=True
                )
                self._thread.start()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[T] = []
        failure: list[BaseException] = []

        def wrapped() -> None:
            try:
                result.append(job())
            except BaseException as exc:  # handed to the waiting task
                failure.append(exc)
            # The waiting task is shielded, so its run cannot have finished, short of a
            # KeyboardInterrupt tearing it down; the thread must outlive that too.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        self._jobs.put(wrapped)
        with trio.CancelScope(shield=True):
            await done.wait()
        if failure:
            raise failure[0]
        return result[0]


OWNER_THREAD = OwnerThread()
"""The daemon's one owner thread (per process: the death signal is per forking thread)."""


class Child:
    """A process the daemon started in a session of its own, with its merged output pipe."""

    def __init__(self, started: "Started") -> None:
        popen, read_end = started
        self._popen = popen
        self.pid = popen.pid
        self.stdout = trio.lowlevel.FdStream(read_end)
        self._wait_lock = trio.Lock()
        self._pidfd: int | None = None
        pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self._pidfd = pidfd_open(self.pid)
            except OSError:
                self._pidfd = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        """The exit status if the child has exited (collecting it), else None."""
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait until the child exits and collect it; returns its exit status."""
        async with self._wait_lock:
            while self._popen.poll() is None:
                if self._pidfd is not None:
                    await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    await trio.sleep(0.05)
            self._close_pidfd()
        code = self._popen.returncode
        assert code is not None
        return code

    def kill(self) -> None:
        if self._popen.returncode is None:
            self._popen.kill()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


Started = tuple["subprocess.Popen[bytes]", int]
"""A child just forked, and the read end of its output pipe."""


def start_child(
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
    death_signal: bool = True,
) -> Started:
    """Fork and exec `argv` in a new session, stdout and stderr into one pipe, with the death
    signal set (unless not `death_signal`). Its stdin is /dev/null, or a file holding `stdin`
    (read at the child's pace: a child that never reads it blocks nobody). Blocking: with the
    death signal, call it on the owner thread (`OWNER_THREAD.run`); then wrap the result in a
    `Child` on the trio side."""
    source = _stdin_file(stdin) if stdin is not None else None
    read_end, write_end = os.pipe()
    try:
        popen = _popen(
            argv,
            stdin=subprocess.DEVNULL if source is None else source,
            stdout=write_end,
            stderr=write_end,
            cwd=cwd,
            env=env,
            death_signal=death_signal,
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
        if source is not None:
            source.close()
    return popen, read_end


def _popen(
    argv: list[str],
    *,
    stdin: int | BinaryIO,
    stdout: int,
    stderr: int,
    cwd: Path,
    env: Mapping[str, str],
    death_signal: bool = True,
) -> "subprocess.Popen[bytes]":
    """Fork and exec `argv` in a new session with the death signal set (if `death_signal`),
    on the given descriptors."""
    prefix = _death_signal_prefix() if death_signal else []
    preexec = die_with(os.getpid()) if death_signal and not prefix else None
    return subprocess.Popen(
        [*prefix, *argv],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
        # Only a prctl and a getppid run between fork and exec: no lock is taken.
        preexec_fn=preexec,  # noqa: PLW1509
    )


def _stdin_file(data: bytes) -> BinaryIO:
    """An unnamed file holding `data`, positioned at its start (the child's stdin)."""
    handle = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it once forked)
    try:
        handle.write(data)
        handle.seek(0)
    except BaseException:
        handle.close()
        raise
    return handle


class PipedChild(Child):
    """A child speaking a protocol over its stdin and stdout (an MCP server)."""

    def __init__(self, started: "PipedStarted") -> None:
        popen, stdin_fd, stdout_fd = started
        super().__init__((popen, stdout_fd))
        self.stdin = trio.lowlevel.FdStream(stdin_fd)


PipedStarted = tuple["subprocess.Popen[bytes]", int, int]
"""A child just forked, the write end of its stdin pipe and the read end of its stdout's."""


def start_piped_child(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], stderr: int
) -> PipedStarted:
    """Like `start_child`, with stdin and stdout as two pipes of their own and stderr into the
    descriptor `stderr`, for a program that speaks a protocol on stdio. Blocking: call it on
    the owner thread, then wrap the result in a `PipedChild`."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    try:
        popen = _popen(argv, stdin=stdin_read, stdout=stdout_write, stderr=stderr, cwd=cwd, env=env)
    except BaseException:
        os.close(stdin_write)
        os.close(stdout_read)
        raise
    finally:
        os.close(stdin_read)
        os.close(stdout_write)
    return popen, stdin_write, stdout_read
