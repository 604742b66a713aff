"""Running a command to completion (a foreground command).

Rules:
- The command runs in a shell in a group of its own, recorded while it runs
  (`tether.daemon.procs.shell`). Its cleaned output reaches `on_output` as it arrives, in
  batches at most every `OUTPUT_INTERVAL` seconds, and only its head and tail are kept
  (`tether.daemon.procs.output`).
- A tree ends with its leader: when the shell exits, members it left behind (`sleep 100 &`)
  are stopped too, and the result counts them. Long-lived processes belong in the
  `ProcessTable` (background commands).
- The command is stopped on timeout (the result says so) and on cancellation; the cleanup is
  shielded, so a cancelled turn still waits (at most the grace period and a little more)
  until the tree is gone, and then the cancellation propagates.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from tether.daemon.procs.groups import KILL_GRACE, count_live_members, kill_tree
from tether.daemon.procs.output import OutputBuffer, OutputDecoder, pump
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.procs.shell import DRAIN_SECONDS, open_command, reap

OUTPUT_INTERVAL = 0.05
"""A foreground command's output reaches `on_output` at most this often (or as soon as
`BATCH_CHARS` characters are waiting)."""


@dataclass(slots=True, eq=False)
class Completed:
    """How a foreground command ended."""

    exit_code: int | None
    duration: float
    output: OutputBuffer
    timed_out: bool
    leftovers: int
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
    stdin: bytes | None = None,
    sandbox: Sandbox | None = None,
    shell: str | None = None,
) -> Completed:
    """Run `command` in `shell` (default: bash; see `tether.daemon.procs.shell`) in its own
    session and wait for it, passing cleaned
    output to `on_output` as it arrives (at most every `OUTPUT_INTERVAL` seconds) and keeping
    its first `head` and last `tail` characters. The group is recorded in `owned` while it
    runs (see `tether.daemon.procs.ownership`). Its stdin is /dev/null, or `stdin`. With
    `sandbox` it runs in it, or raises `SandboxUnavailable` and nothing runs.

    After `time_limit` seconds the tree is stopped and the result says so. When the shell
    exits, members of its group that are still alive are stopped too. Cancellation stops the
    whole tree (shielded: it waits up to `grace` plus about a second) and then propagates.
    """
    started = trio.current_time()
    process = await open_command(command, cwd, env, owned, stdin, sandbox, shell)
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
                partial(pump, process.stdout, OutputDecoder(), sink, eof, interval=OUTPUT_INTERVAL)
            )
            with trio.move_on_after(time_limit) as timer:
                await process.wait()
            if timer.cancelled_caught:
                timed_out = True
                await kill_tree(process.pid, grace, process)
                await process.wait()
            else:
                leftovers = await count_live_members(process.pid)
                if leftovers:
                    await kill_tree(process.pid, grace)
            with trio.move_on_after(DRAIN_SECONDS):
                await eof.wait()
            nursery.cancel_scope.cancel()
    finally:
        await reap(process, grace, owned)
    return Completed(
        exit_code=process.returncode,
        duration=trio.current_time() - started,
        output=buffer,
        timed_out=timed_out,
        leftovers=leftovers,
    )
