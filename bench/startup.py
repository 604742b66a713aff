"""How soon `tether run` reaches the model: warm (the daemon already serves the workspace) and
cold (no daemon: the CLI starts one), plus what each process imports.

- warm: wall time from spawning `tether run go` to the scripted model server receiving its
  first request, median and p90 of 15 runs (after 2 warm-up runs);
- cold: the same with no daemon running, so the CLI spawns one and the first turn waits for
  it; each run stops the daemon again (`tether daemon stop`) before the next;
- the modules each side imports: `python -X importtime` of the CLI's `tether run` path and of
  the daemon up to serving (counted from a daemon started with `-X importtime` and stopped),
  with the slowest top-level imports of the daemon;
- `tether demo` wall time, which includes a cold start, a scripted four-turn session and the
  clean-up.

Bytecode is cached in the benchmark's home and filled before measuring (see the README).

Usage: python bench/startup.py [--runs N]
"""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from _harness import (
    BenchHome,
    bench_home,
    cli_command,
    installed_tether,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    percentile,
    proc_cpu_s,
    row,
    run_cli,
    run_measured,
    runs_argument,
    verdict,
)
from tether.testing import ModelServer

WARM_TARGET_S = 0.05
COLD_TARGET_S = 0.14
DEMO_TARGET_S = 2.0
SCRIPT = {"loop": True, "steps": [{"text": "done"}]}


@dataclass(frozen=True)
class FirstRequest:
    wall_s: float
    """From spawning `tether run go` to the model server's first request."""
    cli_cpu_s: float
    """CPU time the CLI used in all (user + system, from wait4)."""
    daemon_cpu_s: float
    """CPU time the daemon had used when the request arrived (its whole life so far)."""


def first_request(
    home: BenchHome, server: ModelServer, env: Mapping[str, str], cli: Sequence[str]
) -> FirstRequest:
    """Run `tether run go` (it must succeed) and time the model server's first request."""
    server.set_script(SCRIPT)
    arrived: list[tuple[float, float]] = []

    def wait() -> None:
        server.wait_for_requests(1, timeout=30)
        at = time.perf_counter()
        info = home.read_discovery(home.workspace)
        arrived.append((at, proc_cpu_s(info.pid) if info is not None else 0.0))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cli, "run", "--workspace", str(home.workspace), "go"],
        env=dict(env),
        cwd=home.workspace,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    waiter.join(30)
    if proc.returncode != 0 or not arrived:
        raise RuntimeError(f"tether run failed ({proc.returncode})")
    return FirstRequest(arrived[0][0] - start, usage.ru_utime + usage.ru_stime, arrived[0][1])


def cpu(results: Sequence[FirstRequest], side: str) -> list[float]:
    return [r.cli_cpu_s if side == "cli" else r.daemon_cpu_s for r in results]


def daemon_command(
    home: BenchHome, env: Mapping[str, str], cli: Sequence[str], *action: str
) -> None:
    """`tether daemon ACTION...` on the workspace; it must succeed."""
    argv = [*cli, "daemon", *action, "--workspace", str(home.workspace)]
    result = run_measured(argv, env=env, cwd=home.workspace, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"tether daemon {action[0]} failed: {result.stderr!r}")


def warm_and_cold(
    home: BenchHome, server: ModelServer, env: Mapping[str, str], cli: Sequence[str], runs: int
) -> tuple[list[FirstRequest], list[FirstRequest]]:
    """`runs` first requests with a daemon serving, and `runs` with none (each run stops
    the daemon the CLI started), after two of each to warm up."""
    cold: list[FirstRequest] = []
    try:
        for i in range(runs + 2):
            first = first_request(home, server, env, cli)
            daemon_command(home, env, cli, "stop")
            if i >= 2:
                cold.append(first)
        daemon_command(home, env, cli, "start", "--idle-timeout", "0")
        warm = [first_request(home, server, env, cli) for _ in range(runs + 2)][2:]
    finally:
        run_measured(
            [*cli, "daemon", "stop", "--workspace", str(home.workspace)],
            env=env,
            cwd=home.workspace,
            timeout=30,
        )
    return warm, cold


def imported_modules(
    argv: list[str], env: Mapping[str, str]
) -> tuple[int, list[tuple[str, float]]]:
    """How many modules `python -X importtime ARGV...` imported, and its 8 slowest top-level
    imports (cumulative seconds)."""
    result = run_measured([sys.executable, "-X", "importtime", *argv], env=env, timeout=60)
    return parse_importtime(result.stderr)


def parse_importtime(stderr: str) -> tuple[int, list[tuple[str, float]]]:
    count = 0
    top: list[tuple[str, float]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        count += 1
        name = parts[2].rstrip()
        if (len(name) - len(name.lstrip())) // 2 <= 1:
            top.append((name.strip(), int(parts[1]) / 1e6))
    top.sort(key=lambda entry: entry[1], reverse=True)
    return count, top[:8]


def daemon_imports(home: BenchHome) -> tuple[int, list[tuple[str, float]]]:
    """The daemon's imports up to serving: one started with `-X importtime`, stopped once its
    discovery file names it."""
    argv = [sys.executable, "-X", "importtime", "-P", "-m", "tether.daemon"]
    argv += ["--workspace", str(home.workspace), "--idle-timeout", "0"]
    proc = subprocess.Popen(
        argv,
        env=home.env,
        cwd=home.workspace,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = home.read_discovery(home.workspace)
            if info is not None and info.pid == proc.pid:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("the daemon did not start")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    return parse_importtime(stderr)


def main() -> int:
    runs = runs_argument(__doc__, 15)
    load = load_line()

    with model_server(SCRIPT) as server, bench_home(server.base_url) as home:
        measured: list[tuple[str, list[FirstRequest], list[FirstRequest]]] = []
        with installed_tether() as bin_dir:
            if bin_dir is not None:
                # The venv's own compiled bytecode, as a user's install has it.
                env = {k: v for k, v in home.env.items() if k != "PYTHONPYCACHEPREFIX"}
                warm, cold = warm_and_cold(home, server, env, [str(bin_dir / "tether")], runs)
                measured.append(("installed", warm, cold))
        warm, cold = warm_and_cold(home, server, home.env, cli_command(), runs)
        measured.append(("dev venv", warm, cold))
        cli_count, _ = imported_modules(
            ["-c", "import tether.clients.cli.main, tether.clients.cli.commands.turns"], home.env
        )
        daemon_count, daemon_top = daemon_imports(home)
        demo = [run_cli(home, "demo", timeout=60) for _ in range(3)]
        for result in demo:
            if result.returncode != 0:
                raise RuntimeError(f"tether demo failed: {result.stderr!r}")

    print(f"startup: time from `tether run go` to the model's first request, {runs} runs each")
    print(f"  ({machine_line()}; at start: {load})")
    if len(measured) == 1:
        print("  (uv is not on PATH: no installed copy measured, only the development venv)")
    for install, warm, cold in measured:
        for label, runs_of, target in (
            ("warm", warm, WARM_TARGET_S),
            ("cold", cold, COLD_TARGET_S),
        ):
            walls = [r.wall_s for r in runs_of]
            row(
                f"{label} ({install}): to first model request, median",
                ms(median(walls)),
                f"<= {target * 1000:g} ms",
                verdict(median(walls), target + 1e-9),
            )
            row(
                f"{label} ({install}): p90 / min", f"{ms(percentile(walls, 90))} / {ms(min(walls))}"
            )
            row(f"{label} ({install}): CLI CPU, median", ms(median(cpu(runs_of, "cli"))))
            if label == "cold":
                row(
                    f"{label} ({install}): daemon CPU up to the request, median",
                    ms(median(cpu(runs_of, "daemon"))),
                )
    demo_wall = median([result.wall_s for result in demo])
    row(
        "tether demo wall, median of 3",
        ms(demo_wall),
        f"< {DEMO_TARGET_S * 1000:g} ms",
        verdict(demo_wall, DEMO_TARGET_S),
    )
    row("modules the CLI imports for `tether run`", str(cli_count))
    row("modules the daemon imports up to serving", str(daemon_count))
    print("  slowest imports of the daemon (-X importtime, cumulative, .pyc):")
    for name, seconds in daemon_top:
        print(f"    {name:<40} {ms(seconds):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
