"""run_command: run a shell command, in the foreground or as a daemon-owned background process.

The process handling (process groups, killing trees, secret-free environment, the sandbox)
lives in `tether.daemon.procs`; this module turns it into a tool: parameters, limits, the
result text. With the sandbox on (`ToolContext.sandbox`) every command runs in it or not at
all: when it cannot be made the call fails saying why, and a failed command whose output reads
like a network failure is told how to allow the network.
"""

import signal
from collections.abc import Callable, Mapping
from typing import Annotated, ClassVar

import msgspec

from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import Completed, run_to_completion
from tether.daemon.procs.groups import KILL_GRACE
from tether.daemon.procs.sandbox import Sandbox, SandboxUnavailable
from tether.daemon.procs.table import ProcessTable, ProcessTableClosed
from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolOutput,
    ToolParams,
    resolve_in_workspace,
)
from tether.daemon.workspace import display_path

PROCESSES_SERVICE = "processes"
"""The key of the `ProcessTable` in `ToolContext.services`."""

DEFAULT_TIMEOUT = 120
MAX_TIMEOUT = 600
HEAD_CHARS = 6_000
TAIL_CHARS = 14_000
STREAM_LIMIT = 2_000_000
"""Characters of live output sent to clients per command; the result is not affected."""
_MARKER_ROOM = 64


class RunCommandParams(ToolParams, frozen=True, kw_only=True):
    command: Annotated[str, msgspec.Meta(min_length=1, description="The shell command to run.")]
    description: Annotated[
        str,
        msgspec.Meta(description="What the command does, in 5-10 words, shown to the user."),
    ]
    cwd: Annotated[
        str,
        msgspec.Meta(description="Working folder, relative to the workspace. Default '.'."),
    ] = "."
    timeout_seconds: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_TIMEOUT,
            description=f"Stop the command after this many seconds. Default {DEFAULT_TIMEOUT}, "
            f"at most {MAX_TIMEOUT}. Not used with background.",
        ),
    ] = DEFAULT_TIMEOUT
    background: Annotated[
        bool,
        msgspec.Meta(
            description="Start a long-running process (dev server, watcher) that outlives "
            "this turn; returns its id at once. Default false."
        ),
    ] = False


def process_table(ctx: ToolContext) -> ProcessTable:
    table = ctx.services.get(PROCESSES_SERVICE)
    if not isinstance(table, ProcessTable):
        raise ToolFailure("Background processes are not available here.")
    return table


class RunCommand:
    name: ClassVar[str] = "run_command"
    description: ClassVar[str] = (
        "Run a bash command in the workspace (non-interactive: stdin is empty, so commands "
        "must not wait for input; no pager, no colours). Returns the exit code, the duration "
        f"and the output (stdout and stderr together): the first {HEAD_CHARS:,} and last "
        f"{TAIL_CHARS:,} characters when longer. Timeout {DEFAULT_TIMEOUT} s by default, "
        f"{MAX_TIMEOUT} s at most; on timeout the command and every process it started are "
        "stopped, and so are processes it leaves running when it exits. For servers and "
        "watchers use background: true, then command_output and command_kill. Secret-looking "
        "environment variables are not passed on."
    )
    kind: ClassVar[ToolKind] = "command"
    params: ClassVar[type[ToolParams]] = RunCommandParams

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        grace: float = KILL_GRACE,
        stream_limit: int = STREAM_LIMIT,
    ) -> None:
        """`env`: the environment commands start from (default: the daemon's), before secrets
        are removed; `grace`: seconds between SIGTERM and SIGKILL; `stream_limit`: characters
        of a command's output streamed live to clients (the model gets its result anyway)."""
        self.base_env = env
        self.grace = grace
        self.stream_limit = stream_limit

    def command_line(self, params: RunCommandParams) -> str:
        return params.command

    def runs_sandboxed(self, params: RunCommandParams) -> bool:
        return True

    async def run(self, params: RunCommandParams, ctx: ToolContext) -> str | ToolOutput:
        cwd = resolve_in_workspace(ctx.workspace, params.cwd)
        if not cwd.is_dir():
            raise ToolFailure(f"The working folder {params.cwd} does not exist.")
        env = command_env(ctx.env if ctx.env is not None else self.base_env)
        sandbox = ctx.sandbox
        if params.background:
            table = process_table(ctx)
            try:
                managed = await table.start(
                    params.command, cwd, env, ctx.session_id, sandbox, shell=ctx.shell
                )
            except ProcessTableClosed as exc:
                raise ToolFailure(f"Could not start a background process: {exc}.") from exc
            except SandboxUnavailable as exc:
                raise ToolFailure(f"Nothing ran: {exc}.") from exc
            where = display_path(ctx.workspace, cwd)
            return (
                f"Started background process {managed.id} (pid {managed.pid}) in "
                f"{'the workspace root' if where == '.' else where}"
                f"{' in the sandbox' if sandbox is not None else ''}. It keeps running after "
                "this turn until it exits, command_kill stops it or the daemon stops. Read its "
                f"output with command_output(id={managed.id!r})."
            )
        table = ctx.services.get(PROCESSES_SERVICE)
        try:
            done = await run_to_completion(
                params.command,
                cwd=cwd,
                env=env,
                time_limit=params.timeout_seconds,
                on_output=_LimitedStream(ctx.output, self.stream_limit),
                head=HEAD_CHARS,
                tail=TAIL_CHARS,
                grace=self.grace,
                owned=table.owned if isinstance(table, ProcessTable) else None,
                sandbox=sandbox,
                shell=ctx.shell,
            )
        except SandboxUnavailable as exc:
            raise ToolFailure(f"Nothing ran: {exc}.") from exc
        return ToolOutput(
            text=render_result(done, params.timeout_seconds, ctx.result_cap, sandbox),
            exit_code=done.exit_code,
        )


class _LimitedStream:
    def __init__(self, output: Callable[[str], None], limit: int) -> None:
        self.output = output
        self.left = limit

    def __call__(self, text: str) -> None:
        if self.left <= 0:
            return
        if len(text) >= self.left:
            self.output(text[: self.left])
            self.output("\n[… live output stops here; the command is still running …]\n")
            self.left = 0
            return
        self.left -= len(text)
        self.output(text)


def render_result(done: Completed, timeout: float, cap: int, sandbox: Sandbox | None = None) -> str:
    if done.timed_out:
        header = (
            f"Timed out after {timeout:g} s: the command and every process it started were "
            f"stopped ({_exit(done.exit_code)})."
        )
    else:
        header = f"{_exit(done.exit_code)} · {done.duration:.1f} s"
    footer = ""
    if done.leftovers:
        footer = (
            f"\n({done.leftovers} process{'es' if done.leftovers != 1 else ''} it left running "
            f"{'were' if done.leftovers != 1 else 'was'} stopped when it exited; use "
            "background: true for servers and watchers.)"
        )
    failed = done.timed_out or done.exit_code != 0
    if sandbox is not None and failed:
        whole = done.output.render(HEAD_CHARS, TAIL_CHARS)
        if advice := sandbox.network_advice(whole):
            footer += f"\n({advice})"
    # The whole result fits the registry's cap, so nothing is cut twice.
    budget = max(0, min(HEAD_CHARS + TAIL_CHARS, cap - len(header) - len(footer) - _MARKER_ROOM))
    head = min(HEAD_CHARS, budget // 3)
    output = done.output.render(head, budget - head).rstrip("\n") or "(no output)"
    return f"{header}\n{output}{footer}"


def _exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
