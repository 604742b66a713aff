"""A command's process tree from start to end: started in a shell, recorded as the daemon's,
stopped and forgotten.

Rules:
- Every command runs as `shell -c COMMAND`, where the shell is bash (`standard_shell`: the
  first of a few fixed paths, never looked up on PATH; `/bin/sh` where there is no bash)
  unless the caller names another (the user's own `$SHELL` for `shell = "user"` and for
  hooks: `user_shell`). The permission gate judges commands with bash's grammar, so what it
  judged is what runs. The command starts in a new session (so in its own process group,
  whose id is the shell's pid), with stdin from `/dev/null` (or given bytes: a hook's event)
  and stdout and stderr merged into one pipe. It dies with the daemon: killed with its group
  by the watchdog when `owned` is `guarded` (`tether.daemon.procs.watchdog`), else by its
  death signal, set when the daemon's owner thread forks it (`tether.daemon.procs.spawn`).
- The group is recorded durably (`tether.daemon.procs.ownership`) right after the fork, in
  the same job, before anything else can happen, so a crash right after still finds it.
- Ending a command (`reap`) is shielded and always complete: the tree stopped, the leader
  collected, the pipe closed, the record removed.
- What this cannot catch: a process that leaves the group on purpose (`setsid`, a daemonising
  server) is no longer part of the tree — except in the sandbox, where the tree is a pid
  namespace that ends with its shell (`tether.daemon.procs.sandbox`).
- With a sandbox, the shell runs in it, or not at all: `SandboxUnavailable` is raised before
  anything is started when bubblewrap is missing or cannot make one.
"""

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import trio

from tether.daemon.procs.groups import stop_child
from tether.daemon.procs.ownership import (
    TAG_VARIABLE,
    GroupRecord,
    OwnedGroups,
    new_tag,
    start_time,
)
from tether.daemon.procs.sandbox import Sandbox, check
from tether.daemon.procs.spawn import OWNER_THREAD, Child, Started, start_child

DRAIN_SECONDS = 1.0
"""How long to wait for the output pipe to reach its end once the tree is gone."""


ShellChoice = Literal["bash", "user"]
"""The `shell` setting: bash (the default), or the user's own `$SHELL`."""

BASH_PATHS = (
    "/bin/bash",
    "/usr/bin/bash",
    "/usr/local/bin/bash",
    "/opt/homebrew/bin/bash",
    "/run/current-system/sw/bin/bash",
)
"""Where bash is looked for, in order: fixed places only, so no folder on PATH (a project's
`bin/`, a virtualenv) can stand in for it."""


@functools.cache
def standard_shell() -> str:
    """The shell commands run in by default: bash, or `/bin/sh` where there is none."""
    for path in BASH_PATHS:
        if os.access(path, os.X_OK) and Path(path).is_file():
            return path
    return "/bin/sh"


def user_shell(env: Mapping[str, str] | None = None) -> str:
    """The user's own shell: `$SHELL` (of `env`, default this process's) when it names a
    file, else `/bin/sh`."""
    shell = (os.environ if env is None else env).get("SHELL", "")
    return shell if shell and Path(shell).is_file() else "/bin/sh"


def command_shell(choice: ShellChoice, env: Mapping[str, str] | None = None) -> str:
    """The shell the `shell` setting names."""
    return user_shell(env) if choice == "user" else standard_shell()


async def open_command(
    command: str,
    cwd: Path,
    env: Mapping[str, str],
    owned: OwnedGroups | None,
    stdin: bytes | None = None,
    sandbox: Sandbox | None = None,
    shell: str | None = None,
) -> Child:
    """Start `command` in `shell` (default: `standard_shell()`) on the owner thread,
    recording its group in `owned` before anything else can happen (so a crash right after
    still finds it). Its stdin is /dev/null, or `stdin` when given. With `sandbox`, the shell
    runs in it; raises `SandboxUnavailable` (nothing started) when it cannot be made."""
    tag = new_tag()
    full_env = {**env, TAG_VARIABLE: tag}
    argv = [shell or standard_shell(), "-c", command]
    if sandbox is not None:
        await trio.to_thread.run_sync(check, sandbox)
        argv = sandbox.argv(argv, cwd)
        full_env = sandbox.env(full_env)

    # With a watchdog, no death signal: the shell is started here, without the owner thread.
    signalled = owned is None or not owned.guarded

    def start() -> Started:
        started = start_child(argv, cwd=cwd, env=full_env, stdin=stdin, death_signal=signalled)
        if owned is not None:
            pid = started[0].pid
            shown = command[:200]  # for log lines only
            record = GroupRecord(pgid=pid, start=start_time(pid), tag=tag, command=shown)
            owned.add(record, death_signal=signalled)
        return started

    return Child(await OWNER_THREAD.run(start) if signalled else start())


async def reap(process: Child, grace: float, owned: OwnedGroups | None) -> None:
    """Stop the tree, wait for the leader, close the pipe, forget the group. Shielded: runs
    to the end."""
    with trio.CancelScope(shield=True):
        await stop_child(process, grace)
        await process.stdout.aclose()
        if owned is not None:
            owned.remove(process.pid)  # one write
