"""A program the daemon talks to over stdio (an MCP server): started and recorded like any
command's tree (`tether.daemon.procs.shell`), stopped as a whole.

Rules:
- Forked by the owner thread with the death signal, in a session (and process group) of its
  own, its group recorded durably before anything else happens; stdin and stdout are pipes,
  stderr goes to a log file (or nowhere).
- Stopping (`stop_server`) is shielded and complete: stdin is closed first (a stdio server's
  cue to exit), then after `grace` the group gets SIGTERM and, after `grace` more, SIGKILL;
  the leader is collected, the pipes closed, the record removed.
"""

import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import trio

from tether.daemon.procs.groups import stop_child
from tether.daemon.procs.ownership import (
    TAG_VARIABLE,
    GroupRecord,
    OwnedGroups,
    new_tag,
    start_time,
)
from tether.daemon.procs.spawn import OWNER_THREAD, PipedChild, PipedStarted, start_piped_child

MAX_LOG_BYTES = 5 * 1024 * 1024
"""A server's stderr log is started afresh when it has grown past this."""


async def open_server(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    owned: OwnedGroups | None,
    log_path: Path | None,
) -> PipedChild:
    """Start `argv` (no shell) in `cwd`. Raises OSError when it cannot be started."""
    tag = new_tag()
    full_env = {**env, TAG_VARIABLE: tag}
    log = await trio.to_thread.run_sync(open_server_log, log_path)

    def start() -> PipedStarted:
        started = start_piped_child(list(argv), cwd=cwd, env=full_env, stderr=log)
        if owned is not None:
            pid = started[0].pid
            shown = " ".join(argv)[:200]
            owned.add(GroupRecord(pgid=pid, start=start_time(pid), tag=tag, command=shown))
        return started

    try:
        return PipedChild(await OWNER_THREAD.run(start))
    finally:
        os.close(log)  # the child has its own copy


async def stop_server(process: PipedChild, grace: float, owned: OwnedGroups | None) -> None:
    """Close stdin, give the server `grace` seconds to exit, then stop its group; collect it,
    close the pipes, forget the group. Shielded: runs to the end."""
    with trio.CancelScope(shield=True):
        await process.stdin.aclose()
        with trio.move_on_after(grace):
            await process.wait()
        await stop_child(process, grace)
        await process.stdout.aclose()
        if owned is not None:
            await OWNER_THREAD.run(partial(owned.remove, process.pid))


def open_server_log(path: Path | None) -> int:
    """A descriptor appending to a server's stderr log, started afresh when it has grown over
    `MAX_LOG_BYTES` (None: the null device)."""
    if path is None:
        return os.open(os.devnull, os.O_WRONLY)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        large = path.stat().st_size > MAX_LOG_BYTES
    except FileNotFoundError:
        large = False
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if large else os.O_APPEND)
    return os.open(path, flags, 0o600)
