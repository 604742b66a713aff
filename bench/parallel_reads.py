"""Do read-only tool calls in one step overlap?

A 10-step script where every step asks for 1 grep, against the same with 4 greps per step
(different patterns, same tree). With the calls overlapping, a 4-call step costs close to a
1-call step, not four of them; on a 2-core machine, 4 CPU-bound searches can at best run two at
a time, so about 2x is the floor there. Figures come from the daemon's own turn timestamps.

    python bench/parallel_reads.py [--runs 5] [--files 3000]
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
    row,
    running_daemon,
)

STEPS = 10
PATTERNS = ["needle_alpha", "needle_beta", "needle_gamma", "needle_delta"]


def grep_call(pattern: str) -> dict[str, Any]:
    return {"name": "grep", "arguments": {"pattern": pattern, "output_mode": "count"}}


def script(calls_per_step: int) -> dict[str, Any]:
    step = {"tool_calls": [grep_call(p) for p in PATTERNS[:calls_per_step]]}
    return {"steps": [*([step] * STEPS), {"text": "done"}]}


def make_tree(root: Path, files: int) -> None:
    body = "".join(f"line {i} some ordinary text to search through\n" for i in range(180))
    for index in range(files):
        folder = root / "tree" / f"d{index % 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        extra = f"needle_{PATTERNS[index % 4].split('_')[1]}\n" if index % 7 == 0 else ""
        (folder / f"f{index}.txt").write_text(body + extra)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--files", type=int, default=3000)
    args = parser.parse_args()
    handle_sigterm()
    load = load_line()
    with (
        model_server(script(1)) as server,
        bench_home(server.base_url) as home,
        running_daemon(home),
    ):
        make_tree(home.workspace, args.files)

        def per_step(calls: int) -> float:
            server.set_script(script(calls))
            return run_turn(home).turn_s / (STEPS + 1)

        per_step(1)
        per_step(4)  # warm the page cache and the daemon
        one: list[float] = []
        four: list[float] = []
        for _ in range(args.runs):
            one.append(per_step(1))
            four.append(per_step(4))
    single, quad = median(one), median(four)
    print(f"parallel_reads: {STEPS} steps of grep over {args.files} files ({machine_line()})")
    print(f"  {load}")
    row("step with 1 grep call (median)", ms(single))
    row("step with 4 grep calls (median)", ms(quad))
    row("4-call step / 1-call step", f"{quad / single:.2f}x", "target: well under 4x")
    row("if the 4 calls ran one after another", ms(single * 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
