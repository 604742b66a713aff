"""Do explore subagents asked for in one response run at once?

A turn whose first step starts 1 explore subagent, against one whose first step starts 4; every
subagent does the same read-only work, `--steps` model calls each asking for a grep (count mode,
over a tree of `--files` files) and a read_file, then reports. The scripted model answers at
after `--latency-ms` (its steps are matched to each subagent by its prompt): a model's time
to answer is most of a real subagent's life, and what subagents run at once overlap. With the
subagents overlapping, 4 cost about what 1 costs, not four times as much. The same is measured
with a model that answers at once (`latency 0`): then the turn's time is the subagents' real
tool calls and tether's own work, all CPU, and since the daemon runs every subagent's loop on
one thread, on a 2-core machine that CPU, not waiting, sets the floor of the ratio. Figures
come from the daemon's own turn timestamps; the daemon's CPU per turn is printed beside them.

    python bench/subagents.py [--runs 5] [--steps 6] [--files 400] [--latency-ms 250]
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


def subagent_steps(name: str, steps: int, latency_ms: int) -> list[dict[str, Any]]:
    work = {
        "match": f"{name}:",
        "delay_ms": latency_ms,
        "tool_calls": [
            {
                "name": "grep",
                "arguments": {"pattern": f"needle_{name}", "output_mode": "count"},
            },
            {"name": "read_file", "arguments": {"path": "README.md"}},
        ],
    }
    report = {"match": f"{name}:", "delay_ms": latency_ms, "text": f"{name} found its needles"}
    return [*([work] * steps), report]


def script(subagents: int, steps: int, latency_ms: int = 0) -> dict[str, Any]:
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
            *(s for name in names for s in subagent_steps(name, steps, latency_ms)),
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
    parser.add_argument(
        "--latency-ms",
        type=int,
        default=250,
        help="the scripted model's time to answer each subagent request (default 250)",
    )
    args = parser.parse_args()
    handle_sigterm()
    load = load_line()
    results: list[tuple[int, list[float], list[float], dict[int, list[float]]]] = []
    with (
        model_server(script(1, args.steps)) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        make_tree(home.workspace, args.files)
        for latency in (args.latency_ms, 0):
            cpu: dict[int, list[float]] = {1: [], 4: []}

            def turn(
                subagents: int, latency: int = latency, cpu: dict[int, list[float]] = cpu
            ) -> float:
                server.set_script(script(subagents, args.steps, latency))
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
            results.append((latency, one, four, cpu))
    print(
        f"subagents: explore subagents of {args.steps} steps (grep + read_file each) over "
        f"{args.files} files ({machine_line()})"
    )
    print(f"  {load}")
    for latency, one, four, cpu in results:
        single, quad = median(one), median(four)
        ratio = quad / single
        label = f"model latency {latency} ms"
        row(f"{label}: turn with 1 subagent (median)", ms(single))
        row(f"{label}: turn with 4 subagents (median)", ms(quad))
        target = f"<= {TARGET}x {verdict(ratio, TARGET)}" if latency else "(CPU floor)"
        row(f"{label}: 4 subagents / 1", f"{ratio:.2f}x", target)
        row(f"{label}: if the 4 ran one after another", ms(single * 4))
        row(
            f"{label}: daemon CPU per turn, 1 / 4 subagents",
            f"{ms(median(cpu[1]))} / {ms(median(cpu[4]))}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
