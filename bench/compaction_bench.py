"""Compaction: the prompt size over a long session, and the cost of the cheap ladder steps.

In process, with tether's real History, TokenMeter, compaction ladder, tool schemas and
chat-completions encoder; no daemon, no sockets. The model is a stand-in that answers the
summary request (step 3) at once with a fixed structured summary of ~1,500 characters.

1. Prompt size over a scripted session of 200 steps (model calls): 10 turns of 20 steps, each
   turn 19 tool calls (read_file / run_command / grep in turn) whose outputs are ~20 KB each,
   then a text answer. Before every model call the ladder runs (`compact_history`, with
   `new_turn` on a turn's first call), then the prompt is measured: the meter's tokens (an
   estimate here: characters / 3.5, tool schemas included) and the bytes the chat-completions
   request would carry (messages + tools). Printed every 10 steps against the budget, with what
   the ladder did, and what the prompt would be without it. Run for a 128k window (the default)
   and a 32k one (`--window` to choose), both with 8,192 output tokens.

2. Time of steps (1) and (2) on a 200-step history (200 tool results of ~20 KB, every message
   already encoded, as in a live session): the first application (step 1 stubs 194 results,
   step 2 all 200, each dropping the encodings it invalidates) and a repeat with nothing left
   to do, plus `plan_compaction` and `TokenMeter.used()`, which run before every model call.
   Median and max of `--runs` runs on fresh copies. Target: < 5 ms.

Usage: python bench/compaction_bench.py [--runs N] [--window TOKENS ...]
Takes a few seconds.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

from _harness import handle_sigterm, load_line, machine_line, ms, row, verdict
from tether.daemon.context.budget import TokenMeter, context_budget
from tether.daemon.context.compact import (
    apply_elisions,
    compact_history,
    elide_before_new_turn,
    elide_old_tool_results,
    plan_compaction,
)
from tether.daemon.context.history import History
from tether.daemon.context.instructions import environment_block
from tether.daemon.context.prompt import system_prompt
from tether.daemon.providers.base import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    StreamCallbacks,
    ToolCallRequest,
    ToolSet,
)
from tether.daemon.providers.openai import encode_message, encode_tools
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry

TARGET_MS = 5.0
STEPS = 200
STEPS_PER_TURN = 20
OUTPUT_CHARS = 20_000
MAX_OUTPUT = 8_192
WINDOWS = (128_000, 32_000)

SUMMARY = (
    "## User requests\n"
    + "".join(
        f"- Request {i}: refactor module {i} and keep its tests green (done)\n" for i in range(8)
    )
    + "## Work done\n"
    + "".join(f"- Read src/mod{i}.py, changed parse() to return a Result\n" for i in range(8))
    + "## Important facts\n- parse() is defined at src/mod3.py:42; tests in tests/test_mod3.py\n"
    "## Current state\n- All modules but mod9 migrated; tests pass\n"
    "## Next steps\n- Migrate mod9, then run the full test suite\n"
)

TOOLS = ("read_file", "run_command", "grep")


def tool_output(step: int, size: int = OUTPUT_CHARS) -> str:
    """~`size` characters of plausible tool output, different for every step."""
    lines: list[str] = []
    total = 0
    number = 1
    while total < size:
        line = f"{number:>6}\tdef handler_{step}_{number}(request, *, retries=3):  # step {step}\n"
        lines.append(line)
        total += len(line)
        number += 1
    return "".join(lines)[:size]


class SummaryModel:
    """Answers every request at once with the same summary."""

    model = "bench"
    provider = "openai"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        self.calls += 1
        return ModelResponse(text=SUMMARY, usage=ModelUsage(estimated=True))

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


def prompt_bytes(history: History, tools: ToolSet) -> int:
    return sum(len(encode_message(m)) for m in history.messages) + len(encode_tools(tools))


def the_system_prompt() -> str:
    workspace = Path.cwd()
    return system_prompt(workspace) + "\n" + environment_block(workspace)


# --- 1. prompt size over a session -----------------------------------------------------------


async def session(window: int, tools: ToolSet, system: str) -> None:
    budget = context_budget(window, MAX_OUTPUT)
    history = History(system)
    meter = TokenMeter(history.messages, budget=budget, tools=tools)
    model = SummaryModel()
    counts = {"earlier_turns": 0, "old_tool_results": 0, "summary": 0}
    uncompacted_chars = meter.fixed_chars + len(system)
    peak = 0
    peak_fraction = 0.0
    print(f"\n  window {window:,} tokens, max output {MAX_OUTPUT:,}: budget {budget:,} tokens")
    print(
        f"  {'step':>5} {'turn':>4} {'before':>9} {'after':>9} {'of budget':>9} "
        f"{'request':>9} {'no ladder':>10}   ladder"
    )
    for step in range(1, STEPS + 1):
        turn_step = (step - 1) % STEPS_PER_TURN
        new_turn = turn_step == 0
        if new_turn:
            text = f"Turn {(step - 1) // STEPS_PER_TURN + 1}: refactor the next module"
            history.add_user(text)
            uncompacted_chars += len(text)
        before = meter.used()
        records = await compact_history(history, meter, model, new_turn=new_turn)
        for record in records:
            counts[record.step] += 1
        used = meter.used()
        peak = max(peak, used)
        peak_fraction = max(peak_fraction, used / budget)
        request = prompt_bytes(history, tools)
        if step % 10 == 0 or (records and records[-1].step == "summary" and step < 60):
            did = ", ".join(f"{r.step} ({r.messages})" for r in records) or "-"
            print(
                f"  {step:>5} {(step - 1) // STEPS_PER_TURN + 1:>4} {before:>9,} {used:>9,} "
                f"{used / budget:>9.0%} {request / 1024:>7.0f}KB "
                f"{round(uncompacted_chars / 3.5):>10,}   {did}"
            )
        # The model's answer to this call, and the tool result it asked for.
        if turn_step == STEPS_PER_TURN - 1:
            answer = f"Done with this module (step {step})."
            history.add_assistant(answer, [])
            uncompacted_chars += len(answer)
            continue
        tool = TOOLS[step % len(TOOLS)]
        call = ToolCallRequest(
            id=f"call_{step}", name=tool, arguments=f'{{"path":"src/m{step}.py"}}'
        )
        history.add_assistant(f"Looking at step {step}.", [call])
        output = tool_output(step)
        history.add_tool_result(call.id, output)
        uncompacted_chars += len(call.name) + len(call.arguments) + 20 + len(output)
    print(
        f"  peak prompt {peak:,} tokens = {peak_fraction:.0%} of the budget "
        f"({'within' if peak <= budget else 'OVER'} budget); ladder runs: step 2 x"
        f"{counts['earlier_turns']}, step 1 x{counts['old_tool_results']}, "
        f"step 3 x{counts['summary']}"
    )


# --- 2. time of steps 1 and 2 ----------------------------------------------------------------


def long_history(system: str) -> History:
    history = History(system)
    for step in range(1, STEPS + 1):
        if (step - 1) % STEPS_PER_TURN == 0:
            history.add_user(f"Turn {(step - 1) // STEPS_PER_TURN + 1}")
        call = ToolCallRequest(id=f"call_{step}", name="read_file", arguments='{"path":"a.py"}')
        history.add_assistant(f"Step {step}.", [call])
        history.add_tool_result(call.id, tool_output(step))
    for message in history.messages:
        encode_message(message)
    return history


def fresh_copy(history: History) -> History:
    copy = History(history.messages[0].content)
    copy.messages = [history.messages[0]] + [
        Message(
            role=m.role,
            content=m.content,
            tool_calls=m.tool_calls,
            tool_call_id=m.tool_call_id,
            tool_name=m.tool_name,
            cache=dict(m.cache),
        )
        for m in history.messages[1:]
    ]
    return copy


def timed(
    runs: int, setup: Callable[[], History], action: Callable[[History], object]
) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        history = setup()
        start = time.perf_counter()
        action(history)
        times.append(time.perf_counter() - start)
    return times


def report(label: str, times: list[float]) -> None:
    median = statistics.median(times)
    row(
        label,
        ms(median),
        f"< {TARGET_MS:.0f} ms",
        f"max {ms(max(times))} {verdict(median * 1000, TARGET_MS)}",
    )


def timings(runs: int, tools: ToolSet, system: str) -> None:
    base = long_history(system)
    tool_results = sum(1 for m in base.messages if m.role == "tool")
    print(
        f"\n  a {STEPS}-step history: {len(base.messages)} messages, {tool_results} tool "
        f"results of {OUTPUT_CHARS:,} characters, all encoded; median of {runs} runs on fresh "
        "copies"
    )

    def stubbed_once(history: History) -> History:
        elide_old_tool_results(history)
        return history

    report(
        "step 1, first run (stubs 194 results)",
        timed(runs, lambda: fresh_copy(base), elide_old_tool_results),
    )
    report(
        "step 1, nothing left to do",
        timed(runs, lambda: stubbed_once(fresh_copy(base)), elide_old_tool_results),
    )
    report(
        "step 2, first run (stubs 200 results)",
        timed(runs, lambda: fresh_copy(base), elide_before_new_turn),
    )
    meter_budget = context_budget(128_000, MAX_OUTPUT)

    def plan_and_apply(history: History) -> None:
        meter = TokenMeter(history.messages, budget=meter_budget, tools=tools)
        apply_elisions(history, meter, plan_compaction(history, meter, new_turn=True))

    report(
        "plan_compaction + apply (steps 2 and 1)",
        timed(runs, lambda: fresh_copy(base), plan_and_apply),
    )

    def plan_only(history: History) -> None:
        plan_compaction(history, TokenMeter(history.messages, budget=meter_budget, tools=tools))

    report(
        "plan_compaction, nothing to do",
        timed(runs, lambda: stubbed_once(fresh_copy(base)), plan_only),
    )

    def used(history: History) -> None:
        TokenMeter(history.messages, budget=meter_budget, tools=tools).used()

    report("TokenMeter.used()", timed(runs, lambda: base, used))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50, help="timing runs (default 50)")
    parser.add_argument(
        "--window",
        type=int,
        action="append",
        help="context window(s) in tokens for the session (default 128000 and 32000)",
    )
    args = parser.parse_args()
    handle_sigterm()
    tools = ToolRegistry(default_tools()).toolset
    system = the_system_prompt()
    print("compaction_bench")
    print(f"  ({machine_line()}; at start: {load_line()})")
    print(
        f"  1. prompt size over a {STEPS}-step session: {STEPS // STEPS_PER_TURN} turns of "
        f"{STEPS_PER_TURN} steps, tool outputs of {OUTPUT_CHARS:,} characters; tokens are the "
        "meter's (estimate: chars / 3.5, tool schemas included), 'request' the encoded "
        "messages + tools, 'no ladder' the prompt without compaction"
    )
    for window in args.window or WINDOWS:
        trio.run(session, window, tools, system)
    print(f"\n  2. time of the cheap steps (target < {TARGET_MS:.0f} ms)")
    timings(args.runs, tools, system)
    return 0


if __name__ == "__main__":
    sys.exit(main())
