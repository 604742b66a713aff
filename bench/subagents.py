"""Do explore subagents asked for in one response run at once?

A turn whose first step starts 1 explore subagent, against one whose first step starts 4; every
subagent does the same read-only work, `--steps` model calls each asking for a grep (count mode,
over a tree of `--files` files) and a read_file, then reports. The scripted model answers at
once (its steps are matched to each subagent by its prompt), so the turn's time is the
subagents' real tool calls and tether's own work. With the subagents overlapping, 4 cost about
what 1 costs, not four times as much. Figures come from the daemon's own turn timestamps; the
daemon's CPU time per turn is printed beside them, since the daemon runs every subagent's loop
on one thread: on a busy 2-core machine that CPU, not waiting, sets the floor of the ratio.

    python bench/subagents.py [--runs 5] [--steps 6] [--files 400]
"""

import argparse
import sys
from pathlib import Path
from typing import Any

from step_overhead import run_turn

from _harness import (
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    proc_cpu_s,
    row,
    running_daemon,
    verdict,
)

TARGET = 1.3


def subagent_steps(name: str, steps: int) -> list[dict[str, Any]]:
    work = {
        "match": f"{name}:",
        "tool_calls": [
            {
                "name": "grep",
                "arguments": {"pattern": f"needle_{name}", "output_mode": "count"},
            },
            {"name": "read_file", "arguments": {"path": "README.md"}},
        ],
    }
    return [*([work] * steps), {"match": f"{name}:", "text": f"{name} found its needles"}]


def script(subagents: int, steps: int) -> dict[str, Any]:
    names = [f"sub{n}" for n in range(subagents)]
    start = {
        "tool_calls": [
            {
                "name": "task",
                "arguments": {"description": f"Search {name}", "prompt": f"{name}: search"},
            }
            for name in names
        ]
    }
    # The agent's own steps match nothing: the first request is its own, and the last one
    # comes once every subagent has taken all of its steps.
    return {
        "steps": [
            start,
            *(s for name in names for s in subagent_steps(name, steps)),
            {"text": "done"},
        ]
    }


def make_tree(root: Path, files: int) -> None:
    body = "".join(f"line {i} some ordinary text to search through\n" for i in range(120))
    for index in range(files):
        folder = root / "tree" / f"d{index % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index}.txt").write_text(body + f"needle_sub{index % 4}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="model calls of each subagent")
    parser.add_argument("--files", type=int, default=400)
    args = parser.parse_args()
    handle_sigterm()
    load = load_line()
    with (
        model_server(script(1, args.steps)) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        make_tree(home.workspace, args.files)
        cpu: dict[int, list[float]] = {1: [], 4: []}

        def turn(subagents: int) -> float:
            server.set_script(script(subagents, args.steps))
            before = proc_cpu_s(daemon.proc.pid)
            took = run_turn(home).turn_s
            cpu[subagents].append(proc_cpu_s(daemon.proc.pid) - before)
            expected = 2 + subagents * (args.steps + 1)
            if len(server.requests) != expected:
                raise RuntimeError(f"{len(server.requests)} model requests, not {expected}")
            return took

        turn(1)
        turn(4)  # warm the page cache and the daemon
        for taken in cpu.values():
            taken.clear()
        one: list[float] = []
        four: list[float] = []
        for _ in range(args.runs):
            one.append(turn(1))
            four.append(turn(4))
    single, quad = median(one), median(four)
    ratio = quad / single
    print(
        f"subagents: explore subagents of {args.steps} steps (grep + read_file each) over "
        f"{args.files} files ({machine_line()})"
    )
    print(f"  {load}")
    row("turn with 1 subagent (median)", ms(single))
    row("turn with 4 subagents (median)", ms(quad))
    row("4 subagents / 1", f"{ratio:.2f}x", f"<= {TARGET}x {verdict(ratio, TARGET)}")
    row("if the 4 ran one after another", ms(single * 4))
    row("daemon CPU per turn, 1 subagent (median)", ms(median(cpu[1])))
    row("daemon CPU per turn, 4 subagents (median)", ms(median(cpu[4])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
