"""Per-step overhead of the turn loop, against a warm daemon and the scripted model server.

A step is one model call plus the tool call it asks for. `tether run --json` runs a 20-step
script (19 steps each asking for one read_file or list_dir call, then a final text) and a
1-step script (just the text); the difference divided by 19 (the extra steps) is the cost of
one step. The model server answers at once, so this is tether's own overhead per step: the
HTTP request to the model, SSE parsing, events, the tool, history, the store. A third script
has 19 run_command calls (`true`) instead: a process tree started, waited for, recorded and
forgotten; that figure includes the fork and exec of the shell.

Two figures:
- CLI (marginal): (median wall of the 20-step run - median wall of the 1-step run) / 19.
- in-daemon: from the events' own timestamps, turn_completed.endedAt - turn_started.startedAt,
  both for the 20-step turn / 20 and marginally, (20-step - 1-step) / 19.

The daemon's own CPU time per step (all its threads, from /proc: schedstat), marginally like
the in-daemon figure: less disturbed than wall time by other work on a shared machine.

Where the time goes, per step (medians): the model call (request sent to reply parsed, the fake
server's own answer included, and that answer timed alone) and the tool call, as the daemon
logs them ("model call" and "tool call" lines, `ms`), and the rest of the step (events,
history, the store, the loop).
For run_command, the same process machinery is also timed in this process, phase by phase:
starting the shell (fork, exec and the ownership record), the shell running until it exits,
the end of its output, and the reaping (the group checked gone, the pipe closed, the record
line written); once as the daemon does it while its watchdog runs (vfork on the trio thread,
no death signal), once with the death signal (setpriv, forked by the owner thread), as it does
when no watchdog runs.

Usage: python bench/step_overhead.py [--runs N]
"""

import contextlib
import dataclasses
import sys
import tempfile
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from _harness import (
    bench_home,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    row,
    running_daemon,
    runs_argument,
    verdict,
)
from _turns import (
    SCRIPT_1,
    SCRIPT_20,
    SCRIPT_COMMANDS,
    TOOL_STEPS,
    TurnRun,
    marginal_steps,
    min_med,
    run_turn,
)
from tether.daemon.procs.env import command_env
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.procs.shell import open_command, reap
from tether.testing.handler import Handler

TARGET_MS = 15.0


@dataclass(frozen=True)
class StepParts:
    """Medians over the steps of some turns, in seconds, from the daemon's log."""

    model_s: float
    server_s: float
    """The part of the model call the fake server spent answering (in this process)."""
    tool_s: float


@contextlib.contextmanager
def timed_answers() -> Generator[list[float]]:
    """The seconds the fake model server (a thread of this process) spends on each model
    request, from its headers read to its answer written, while the block runs."""
    original = Handler.do_POST
    spent: list[float] = []

    def timed(self: Handler) -> None:
        started = time.perf_counter()
        original(self)
        if self.path.endswith(("/chat/completions", "/messages")):
            spent.append(time.perf_counter() - started)

    Handler.do_POST = timed
    try:
        yield spent
    finally:
        Handler.do_POST = original


def step_parts(
    records: list[dict[str, Any]], turns: list[TurnRun], answers: dict[str, list[float]]
) -> StepParts:
    ids = {turn.turn_id for turn in turns}
    server = [spent for turn in turns for spent in answers.get(turn.turn_id, [])]
    model: list[float] = []
    tool: list[float] = []
    for record in records:
        if record.get("turn") not in ids:
            continue
        if record.get("msg") == "model call":
            model.append(record["ms"] / 1000)
        elif record.get("msg") == "tool call":
            tool.append(record["ms"] / 1000)
    return StepParts(model_s=median(model), server_s=median(server), tool_s=median(tool))


PHASES = ("start", "shell runs", "output ends", "reap", "total")


async def _time_commands(runs: int, guarded: bool) -> dict[str, list[float]]:
    """Run `true` as the daemon runs a foreground command, `runs` times, timing each phase."""
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        owned = OwnedGroups(cwd / "processes.json")
        owned.guarded = guarded  # as while the daemon's watchdog runs
        env = command_env()
        for _ in range(runs):
            marks = [time.perf_counter()]
            process = await open_command("true", cwd, env, owned)
            marks.append(time.perf_counter())
            await process.wait()
            marks.append(time.perf_counter())
            while await process.stdout.receive_some(65536):
                pass
            marks.append(time.perf_counter())
            await reap(process, 1.0, owned)
            marks.append(time.perf_counter())
            for name, begin, end in zip(PHASES, marks, marks[1:], strict=False):
                phases[name].append(end - begin)
            phases["total"].append(marks[-1] - marks[0])
            await trio.sleep(0.001)  # the daemon's other work would come between commands
        owned.close()
    return phases


def command_phases(runs: int) -> dict[bool, dict[str, list[float]]]:
    """Phase timings with the watchdog's way (True) and the death signal's (False),
    interleaved in batches so that drift affects both alike."""
    found: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    for _ in range(5):
        for guarded in (True, False):
            got = trio.run(_time_commands, max(1, runs // 5), guarded)
            for name, values in got.items():
                found[guarded].setdefault(name, []).extend(values)
    return found


def main() -> int:
    runs = runs_argument(__doc__, 7, "runs of each script")
    load = load_line()

    with (
        model_server(SCRIPT_1) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        answers: dict[str, list[float]] = {}

        def one(script: dict[str, Any], steps: int) -> TurnRun:
            server.set_script(script)
            with timed_answers() as spent:
                cpu = daemon.threads_cpu_s()
                turn = run_turn(home)
                turn = dataclasses.replace(turn, cpu_s=daemon.threads_cpu_s() - cpu)
            answers.setdefault(turn.turn_id, []).extend(spent)
            got = len(server.requests)
            if got != steps:
                raise RuntimeError(f"expected {steps} model calls, the model server saw {got}")
            return turn

        # Warm-up: the first turns pay for lazy imports, the HTTP connection pool, the store.
        one(SCRIPT_1, 1)
        one(SCRIPT_20, 20)
        one(SCRIPT_1, 1)
        one(SCRIPT_COMMANDS, 20)
        short: list[TurnRun] = []
        long: list[TurnRun] = []
        commands: list[TurnRun] = []
        for _ in range(runs):  # interleaved, so drift affects all alike
            short.append(one(SCRIPT_1, 1))
            long.append(one(SCRIPT_20, 20))
            commands.append(one(SCRIPT_COMMANDS, 20))
        records = home.log_records(home.workspace)
    read_parts = step_parts(records, long, answers)
    command_parts = step_parts(records, commands, answers)
    phases = command_phases(max(50, runs * 10))

    wall_1 = median([r.wall_s for r in short])
    wall_20 = median([r.wall_s for r in long])
    turn_1 = median([r.turn_s for r in short])
    turn_20 = median([r.turn_s for r in long])
    turn_commands = median([r.turn_s for r in commands])
    command_step_s = (turn_commands - turn_1) / TOOL_STEPS
    cli_step = (wall_20 - wall_1) / TOOL_STEPS
    daemon_step = turn_20 / 20
    daemon_marginal = (turn_20 - turn_1) / TOOL_STEPS

    print(f"step_overhead: median of {runs} runs each, warm daemon")
    print(f"  ({machine_line()}; at start: {load})")
    print("  scripts: 1 step (text) vs 20 steps (19 x one read_file/list_dir call + text)")
    print("           and 20 steps of 19 x run_command `true` + text")
    row("tether run wall, 1-step script", ms(wall_1))
    row("tether run wall, 20-step script", ms(wall_20))
    row("turn time in daemon, 1-step (endedAt-startedAt)", ms(turn_1))
    row("turn time in daemon, 20-step", ms(turn_20))
    row(
        "per step, CLI wall (20-step - 1-step) / 19",
        ms(cli_step),
        f"< {TARGET_MS:g} ms",
        verdict(cli_step * 1000, TARGET_MS),
    )
    row(
        "per step, in daemon: 20-step turn / 20",
        ms(daemon_step),
        f"< {TARGET_MS:g} ms",
        verdict(daemon_step * 1000, TARGET_MS),
    )
    row(
        "per step, in daemon: (20-step - 1-step) / 19",
        ms(daemon_marginal),
        f"< {TARGET_MS:g} ms",
        verdict(daemon_marginal * 1000, TARGET_MS),
    )
    row("turn time in daemon, 20-step with run_command", ms(turn_commands))
    row("per step with run_command `true`, in daemon", ms(command_step_s))
    cli_min_step = (min(r.wall_s for r in long) - min(r.wall_s for r in short)) / TOOL_STEPS
    row("per step, CLI wall from the minimums (less noisy)", ms(cli_min_step))
    print(f"  events per 20-step turn seen by the CLI: {long[-1].events}")
    command_steps = marginal_steps(commands, turn_1)
    read_steps = marginal_steps(long, turn_1)
    print("  per step in daemon, min / median over the runs (marginal, as above):")
    row("    read_file / list_dir step", min_med(read_steps))
    row("    run_command `true` step", min_med(command_steps))
    cpu_1 = median([r.cpu_s for r in short])
    print("  the daemon's CPU time per step, min / median over the runs (marginal):")
    row("    read_file / list_dir step", min_med([(r.cpu_s - cpu_1) / TOOL_STEPS for r in long]))
    row(
        "    run_command `true` step",
        min_med([(r.cpu_s - cpu_1) / TOOL_STEPS for r in commands]),
    )
    print("  where a step's time goes (medians of the daemon's log lines):")
    for label, parts, step in (
        ("read_file / list_dir", read_parts, daemon_marginal),
        ("run_command `true`", command_parts, command_step_s),
    ):
        rest = step - parts.model_s - parts.tool_s
        row(f"    {label}: model call", ms(parts.model_s))
        row(f"    {label}:   of which the fake server's answer", ms(parts.server_s))
        row(f"    {label}: tool call", ms(parts.tool_s))
        row(f"    {label}: the rest (events, store, loop)", ms(rest))
    print("  a run_command `true`, phase by phase in this process, min / median:")
    for guarded, label in ((True, "watchdog, vfork"), (False, "death signal, setpriv")):
        for name in PHASES:
            row(f"    {label}: {name}", min_med(phases[guarded][name]))
    for label, turns in (("1-step", short), ("20-step", long)):
        walls = [r.wall_s for r in turns]
        print(f"  {label} wall min / max: {ms(min(walls))} / {ms(max(walls))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
