"""`tether run` latency and memory against an already running daemon.

- wall time of `tether run "go"` with a 1-step script (the model answers "done" at once), from
  spawning the CLI to reaping it: median and p90 over 15 runs (after 2 warm-up runs);
- the CLI's peak RSS (ru_maxrss from wait4);
- the daemon's RSS (VmRSS) just after startup and after those runs, and its peak (VmHWM);
- the import cost of the CLI: `python -c "import tether.clients.cli.main"` minus
  `python -c pass` (each a fresh process, OS page cache warm), with the slowest top-level
  imports from `python -X importtime`.

Bytecode: the main figures use a .pyc cache kept in the benchmark's temporary home (what a
normal install has after its first run). The same wall time and import cost are also measured
"as installed, writing no bytecode": only __pycache__ folders already in the install are used.
In an environment with PYTHONDONTWRITEBYTECODE=1 and no .pyc files for tether and its
dependencies, every start compiles them from source.

Usage: python bench/run_latency.py [--runs N]
"""

import sys
import time
from collections.abc import Mapping

import tether.clients.cli.main as cli_main
from _harness import (
    bench_home,
    installed_bytecode,
    load_line,
    machine_line,
    mb,
    median,
    model_server,
    ms,
    percentile,
    row,
    run_cli,
    run_measured,
    running_daemon,
    runs_argument,
    verdict,
)

WALL_TARGET_S = 0.25
CLIENT_RSS_TARGET_MB = 60
DAEMON_RSS_TARGET_MB = 80
IMPORT_RUNS = 9
NO_PYC_RUNS = 7
IMPORT_CLI = "import tether.clients.cli.main"

SCRIPT = {"loop": True, "steps": [{"text": "done"}]}


def python_wall(code: str, runs: int, env: Mapping[str, str]) -> float:
    """Median wall time of `python -c CODE` in fresh processes."""
    walls: list[float] = []
    for _ in range(runs):
        result = run_measured([sys.executable, "-c", code], env=env)
        if result.returncode != 0:
            raise RuntimeError(f"python -c {code!r} failed: {result.stderr.strip()}")
        walls.append(result.wall_s)
    return median(walls)


def importtime_top(module: str, count: int, env: Mapping[str, str]) -> list[tuple[str, float]]:
    """The `count` slowest imports (cumulative µs) that the import of `module` triggers
    directly (depth-1 entries of `python -X importtime`)."""
    argv = [sys.executable, "-X", "importtime", "-c", f"import {module}"]
    result = run_measured(argv, env=env)
    entries: list[tuple[str, float]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth <= 1:
            entries.append((name.strip(), int(parts[1]) / 1e6))
    entries.sort(key=lambda entry: entry[1], reverse=True)
    return entries[:count]


def main() -> int:
    runs = runs_argument(__doc__, 15)
    load = load_line()

    with (
        model_server(SCRIPT) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        time.sleep(0.5)  # let startup settle before reading its memory
        rss_start = daemon.rss_kb()

        def measure(count: int, env: Mapping[str, str]) -> tuple[list[float], list[int]]:
            walls: list[float] = []
            rss: list[int] = []
            for i in range(count + 2):
                result = run_cli(home, "run", "--workspace", str(home.workspace), "go", env=env)
                if result.returncode != 0 or result.stdout.strip() != "done":
                    raise RuntimeError(
                        f"tether run failed ({result.returncode}):"
                        f" {result.stdout!r} {result.stderr!r}"
                    )
                if i >= 2:  # the first two are warm-up (and fill the bytecode cache)
                    walls.append(result.wall_s)
                    rss.append(result.max_rss_kb)
            return walls, rss

        walls, rss = measure(runs, home.env)
        nopyc_walls, _ = measure(NO_PYC_RUNS, home.env_without_bytecode())
        time.sleep(0.2)
        rss_after = daemon.rss_kb()
        hwm = daemon.peak_rss_kb()

        bare = python_wall("pass", IMPORT_RUNS, home.env)
        with_cli = python_wall(IMPORT_CLI, IMPORT_RUNS, home.env)
        bare_nopyc = python_wall("pass", IMPORT_RUNS, home.env_without_bytecode())
        with_cli_nopyc = python_wall(IMPORT_CLI, IMPORT_RUNS, home.env_without_bytecode())
        top = importtime_top("tether.clients.cli.main", 8, home.env)

    wall_med = median(walls)
    wall_p90 = percentile(walls, 90)
    client_rss = max(rss)
    print(f"run_latency: {runs} runs of `tether run go`, 1-step script, warm daemon")
    print(f"  ({machine_line()}; at start: {load})")
    row(
        "tether run wall, median",
        ms(wall_med),
        f"< {WALL_TARGET_S * 1000:g} ms",
        verdict(wall_med, WALL_TARGET_S),
    )
    row(
        "tether run wall, p90",
        ms(wall_p90),
        f"< {WALL_TARGET_S * 1000:g} ms",
        verdict(wall_p90, WALL_TARGET_S),
    )
    row("tether run wall, min / max", f"{ms(min(walls))} / {ms(max(walls))}")
    row(
        "client peak RSS (max over runs)",
        mb(client_rss),
        f"< {CLIENT_RSS_TARGET_MB} MB",
        verdict(client_rss / 1024, CLIENT_RSS_TARGET_MB),
    )
    row(
        "daemon RSS after startup (idle)",
        mb(rss_start),
        f"< {DAEMON_RSS_TARGET_MB} MB",
        verdict(rss_start / 1024, DAEMON_RSS_TARGET_MB),
    )
    row(
        f"daemon RSS after {runs + 2} runs (idle)",
        mb(rss_after),
        f"< {DAEMON_RSS_TARGET_MB} MB",
        verdict(rss_after / 1024, DAEMON_RSS_TARGET_MB),
    )
    row("daemon peak RSS (VmHWM)", mb(hwm))
    row("python -c pass, median wall", ms(bare))
    row("python -c 'import tether.clients.cli.main'", ms(with_cli))
    row("  => CLI import cost (difference)", ms(with_cli - bare))
    row("  => rest of tether run (median run - import)", ms(wall_med - with_cli))
    have = installed_bytecode(cli_main.__file__ or "")
    state = "present" if have else "absent: compiled at every start"
    print(f"  as installed, writing no bytecode (tether's own .pyc files {state}):")
    row(
        f"tether run wall, median of {NO_PYC_RUNS}",
        ms(median(nopyc_walls)),
        f"< {WALL_TARGET_S * 1000:g} ms",
        verdict(median(nopyc_walls), WALL_TARGET_S),
    )
    row("CLI import cost (difference)", ms(with_cli_nopyc - bare_nopyc))
    print("  slowest imports under tether.clients.cli.main (-X importtime, cumulative, .pyc):")
    for name, seconds in top:
        print(f"    {name:<40} {ms(seconds):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
