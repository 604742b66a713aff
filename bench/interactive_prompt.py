"""Time to the interactive prompt: `tether` alone, on a real pseudo-terminal, against an
already running daemon.

Each run spawns `tether -w WORKSPACE` on a pty and times until the prompt's status line is
drawn (the prompt is up and reads keys), then leaves with Ctrl-D. Median and p90 over the
runs, after 2 warm-up runs that also fill the bytecode cache (prompt_toolkit included). The
pty answers cursor position requests at once, as a terminal emulator does.

Usage: python bench/interactive_prompt.py [--runs N]
"""

import sys
import time

from _harness import (
    bench_home,
    cli_command,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    percentile,
    row,
    running_daemon,
    runs_argument,
    verdict,
)
from tests.screen import CTRL_D, Terminal

TARGET_S = 0.3
STATUS = " · context "
"""Part of the status line, drawn once the prompt reads keys."""


def time_to_prompt(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    terminal = Terminal(argv, env=env)
    try:
        terminal.expect(STATUS, timeout=30)
        elapsed = time.perf_counter() - start
        terminal.send(CTRL_D)
        if terminal.wait(timeout=30) != 0:
            raise RuntimeError(f"tether left with an error:\n{terminal.text}")
    finally:
        terminal.close()
    return elapsed


def main() -> int:
    runs = runs_argument(__doc__, 11)
    load = load_line()
    with (
        model_server({"loop": True, "steps": [{"text": "done"}]}) as server,
        bench_home(server.base_url) as home,
        running_daemon(home),
    ):
        argv = [*cli_command(), "-w", str(home.workspace)]
        walls = [time_to_prompt(argv, home.env) for _ in range(runs + 2)][2:]
    print(f"interactive_prompt: {runs} runs of `tether` to its prompt, warm daemon, on a pty")
    print(f"  ({machine_line()}; at start: {load})")
    wall_med = median(walls)
    row(
        "time to the prompt, median",
        ms(wall_med),
        f"< {TARGET_S * 1000:g} ms",
        verdict(wall_med, TARGET_S),
    )
    row("time to the prompt, p90", ms(percentile(walls, 90)))
    row("fastest", ms(min(walls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
