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

Usage: python bench/step_overhead.py [--runs N]
"""

import sys
from dataclasses import dataclass
from typing import Any

import msgspec

from _harness import (
    BenchHome,
    bench_home,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    row,
    run_cli,
    running_daemon,
    runs_argument,
    verdict,
)

TARGET_MS = 15.0
TOOL_STEPS = 19


def tool_step(index: int) -> dict[str, Any]:
    if index % 2 == 0:
        call = {"name": "read_file", "arguments": {"path": "README.md"}}
    else:
        call = {"name": "list_dir", "arguments": {"path": "."}}
    return {"tool_calls": [call]}


def command_step(index: int) -> dict[str, Any]:
    call = {"name": "run_command", "arguments": {"command": "true", "description": "nothing"}}
    return {"tool_calls": [call]}


SCRIPT_1 = {"steps": [{"text": "done"}]}
SCRIPT_20 = {"steps": [*(tool_step(i) for i in range(TOOL_STEPS)), {"text": "done"}]}
SCRIPT_COMMANDS = {"steps": [*(command_step(i) for i in range(TOOL_STEPS)), {"text": "done"}]}


class _Event(msgspec.Struct):
    type: str
    startedAt: float = 0.0  # the wire spelling
    endedAt: float = 0.0
    status: str = ""


class _Line(msgspec.Struct):
    seq: int
    event: _Event


_line = msgspec.json.Decoder(_Line)


@dataclass(frozen=True)
class TurnRun:
    wall_s: float
    turn_s: float
    """endedAt - startedAt of the turn, from the daemon's own event timestamps."""
    events: int


def run_turn(home: BenchHome) -> TurnRun:
    result = run_cli(
        home,
        "run",
        "--workspace",
        str(home.workspace),
        "--permission-mode",
        "auto",
        "--json",
        "go",
    )
    if result.returncode != 0:
        raise RuntimeError(f"tether run exited {result.returncode}: {result.stderr.strip()}")
    started = ended = 0.0
    status = ""
    count = 0
    for text in result.stdout.splitlines():
        line = _line.decode(text)
        count += 1
        if line.event.type == "turn_started":
            started = line.event.startedAt
        elif line.event.type == "turn_completed":
            ended = line.event.endedAt
            status = line.event.status
    if status != "completed" or not started or not ended:
        raise RuntimeError(f"the turn did not complete (status {status!r}): {result.stdout!r}")
    return TurnRun(wall_s=result.wall_s, turn_s=ended - started, events=count)


def main() -> int:
    runs = runs_argument(__doc__, 7, "runs of each script")
    load = load_line()

    with (
        model_server(SCRIPT_1) as server,
        bench_home(server.base_url) as home,
        running_daemon(home),
    ):

        def one(script: dict[str, Any], steps: int) -> TurnRun:
            server.set_script(script)
            turn = run_turn(home)
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
    for label, turns in (("1-step", short), ("20-step", long)):
        walls = [r.wall_s for r in turns]
        print(f"  {label} wall min / max: {ms(min(walls))} / {ms(max(walls))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
