"""Scripted turns through `tether run --json`, timed by the daemon's own event timestamps: the
step scripts of `step_overhead.py` (read_file / list_dir steps, run_command `true` steps, one
text step), shared by the benchmarks that measure the cost of a step.

A step is one model call plus the tool call it asks for; the model server answers at once, so
(turn time of the 20-step script - that of the 1-step script) / 19 is tether's own overhead
per step.
"""

import statistics
from dataclasses import dataclass
from typing import Any

import msgspec

from _harness import BenchHome, ms, run_cli

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
    turnId: str = ""  # the wire spelling
    startedAt: float = 0.0  # the wire spelling
    endedAt: float = 0.0
    status: str = ""


class _Line(msgspec.Struct):
    seq: int
    event: _Event
    sessionId: str = ""  # the wire spelling


_line = msgspec.json.Decoder(_Line)


@dataclass(frozen=True)
class TurnRun:
    wall_s: float
    turn_s: float
    """endedAt - startedAt of the turn, from the daemon's own event timestamps."""
    events: int
    turn_id: str
    session_id: str = ""
    cpu_s: float = 0.0
    """The daemon's CPU time over the run."""


def run_turn(home: BenchHome, *options: str) -> TurnRun:
    """`tether run --json go` in a new session of `home`'s workspace (`options` added, such
    as `--worktree`), every tool allowed; the turn must complete."""
    result = run_cli(
        home,
        "run",
        "--workspace",
        str(home.workspace),
        "--permission-mode",
        "auto",
        "--json",
        *options,
        "go",
    )
    if result.returncode != 0:
        raise RuntimeError(f"tether run exited {result.returncode}: {result.stderr.strip()}")
    started = ended = 0.0
    status = turn_id = session_id = ""
    count = 0
    for text in result.stdout.splitlines():
        line = _line.decode(text)
        count += 1
        session_id = session_id or line.sessionId
        if line.event.type == "turn_started":
            started = line.event.startedAt
            turn_id = line.event.turnId
        elif line.event.type == "turn_completed":
            ended = line.event.endedAt
            status = line.event.status
    if status != "completed" or not started or not ended:
        raise RuntimeError(f"the turn did not complete (status {status!r}): {result.stdout!r}")
    return TurnRun(
        wall_s=result.wall_s,
        turn_s=ended - started,
        events=count,
        turn_id=turn_id,
        session_id=session_id,
    )


def marginal_steps(turns: list[TurnRun], one_step_s: float) -> list[float]:
    """Each turn's cost per extra step over a 1-step turn of `one_step_s`, in seconds."""
    return [(turn.turn_s - one_step_s) / TOOL_STEPS for turn in turns]


def min_med(values: list[float]) -> str:
    return f"{ms(min(values))} / {ms(statistics.median(values))}"
