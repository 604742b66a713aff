"""A language server's process group: started in a session of its own, with its stderr in a
log file, and killed as a whole.

Its own session gives the server its own process group, so a wrapper script and the real
server (basedpyright's Python launcher and its node process) are stopped together.
"""

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from tether.daemon.procs.groups import stop_child
from tether.daemon.procs.server import open_server_log

KILL_GRACE = 0.5


async def spawn_server(
    command: Sequence[str], root: Path, env: Mapping[str, str], log_path: Path | None
) -> trio.Process:
    """Start `command` in `root` with piped stdin and stdout; stderr goes to `log_path` (else
    nowhere). Raises OSError when it cannot be started."""
    log: int | None = None
    if log_path is not None:
        log = await trio.to_thread.run_sync(open_server_log, log_path)
    try:
        return await trio.lowlevel.open_process(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if log is None else log,
            cwd=root,
            env=dict(env),
            start_new_session=True,
        )
    finally:
        if log is not None:
            os.close(log)  # the child has its own copy


async def reap_server(process: trio.Process) -> None:
    """Kill what is left of the group and collect the process. Call it shielded."""
    await stop_child(process, KILL_GRACE)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            await stream.aclose()
