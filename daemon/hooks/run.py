"""Running one hook: the user's shell runs its command in the workspace, in a process group
the daemon owns (recorded like a command's, stopped with the daemon), with the event's JSON on
stdin and the environment commands get (secret-looking variables removed).

Its output (stdout and stderr, merged as for commands) is kept head and tail; after its
timeout the whole tree is stopped. Nothing here raises for the hook's sake: a hook that cannot
start is an outcome like one that exits 1.
"""

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.daemon.config.hooks import HookConfig
from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import run_to_completion
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.procs.shell import user_shell

OUTPUT_HEAD = 6000
OUTPUT_TAIL = 2000
"""Characters of a hook's output kept (and passed on) from its start and its end."""
EVENT_VARIABLE = "TETHER_HOOK_EVENT"


@dataclass(frozen=True, slots=True)
class HookRun:
    """How one run of a hook ended."""

    exit_code: int | None
    """Its exit status (negative: the signal that killed it); None when it did not start."""
    output: str
    """Its output, stripped, head and tail kept."""
    timed_out: bool = False
    error: str = ""
    """Why it could not start."""

    def failure(self, timeout: float, *, deny_code: int | None = None) -> str:
        """Why this run counts as a failure, or "" when it does not: a clean exit (or
        `deny_code`, the denial convention where it applies) is none."""
        if self.error:
            return f"could not start: {self.error}"
        if self.timed_out:
            return f"timed out after {timeout:g} s and was stopped"
        code = self.exit_code
        if code == 0 or (deny_code is not None and code == deny_code):
            return ""
        why = _exit_reason(code)
        tail = self.output[-300:].strip()
        return f"{why}: {tail}" if tail else why


def _exit_reason(code: int | None) -> str:
    """How a hook's exit reads. A shell that runs the command as its child (rather than
    exec'ing it) reports a child killed by signal N as 128 + N, so that status names the
    signal too: the notice reads the same whichever shell the user has."""
    if code is not None and code < 0:
        return f"was killed by signal {-code}"
    if code is not None and code > 128 and _is_signal(code - 128):
        return f"exited {code} (killed by signal {code - 128})"
    return f"exited {code}"


def _is_signal(number: int) -> bool:
    try:
        signal.Signals(number)
    except ValueError:
        return False
    return True


async def run_hook(
    hook: HookConfig,
    payload: bytes,
    *,
    workspace: Path,
    owned: OwnedGroups | None = None,
    env: Mapping[str, str] | None = None,
) -> HookRun:
    """Run `hook` with `payload` on its stdin and wait for it (at most its timeout, plus the
    stop of its tree). `env`: the environment to start from (default: the daemon's).
    Cancellation stops the tree and propagates."""
    full_env = {**command_env(env), EVENT_VARIABLE: hook.event}
    try:
        done = await run_to_completion(
            hook.command,
            cwd=workspace,
            env=full_env,
            time_limit=hook.timeout,
            on_output=lambda _text: None,
            head=OUTPUT_HEAD,
            tail=OUTPUT_TAIL,
            owned=owned,
            stdin=payload,
            shell=user_shell(full_env),
        )
    except OSError as exc:
        return HookRun(exit_code=None, output="", error=str(exc))
    output = done.output.render(OUTPUT_HEAD, OUTPUT_TAIL).strip()
    return HookRun(exit_code=done.exit_code, output=output, timed_out=done.timed_out)
