"""Diagnostics latency after an edit: a warm language-server pool against a cold server start.

On a small generated Python project (a package of 12 modules importing one another, and an
`app.py` that imports them), for ruff (`ruff server`) and basedpyright
(`basedpyright-langserver`), each found like the daemon finds them (PATH, then next to the
interpreter), measures the wall time of `LspPool.diagnostics_after_edit([app.py])` after
writing a new version of `app.py` that holds one error the server reports as an error
(ruff: an undefined name, F821; basedpyright: a type error):

- cold: a fresh pool each run, so the call starts the server, initializes it, opens the file
  and waits for its diagnostics (`--cold-runs`, default 3);
- warm: the same pool, one edit after another (`--runs`, default 15, after 2 unmeasured), each
  a didChange of an open document and a pull of its diagnostics;
- warm, both servers in one pool (what a turn waits for with Python files).

Every measured call must return the expected error; a call that does not counts as a failure.
Targets: warm under 100 ms for ruff, under 800 ms for basedpyright.

Usage: python bench/lsp_bench.py [--runs N] [--cold-runs N]
Takes about 15 s on a 2-core machine.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from _harness import handle_sigterm, load_line, machine_line, median, ms, percentile, row, verdict
from tether.daemon.lsp.diagnostics import Diagnostic
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.servers import find_program

TARGETS = {"ruff": 0.100, "basedpyright": 0.800}
COLD_WAIT = 30.0
WARM_WAIT = 5.0
MODULES = 12


def make_project(root: Path) -> Path:
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n')
    package = root / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for n in range(MODULES):
        previous = f"from shop.m{n - 1} import Item{n - 1}\n" if n else ""
        base = f"Item{n - 1}" if n else "object"
        (package / f"m{n}.py").write_text(
            f"{previous}\n\n"
            f"class Item{n}({base}):\n"
            f'    """Item number {n}."""\n\n'
            f"    def __init__(self, name: str, price: float) -> None:\n"
            f"        self.name = name\n"
            f"        self.price = price\n\n"
            f"    def total(self, count: int) -> float:\n"
            f"        return self.price * count\n\n\n"
            f"def make{n}(name: str) -> Item{n}:\n"
            f"    return Item{n}(name, {n}.5)\n"
        )
    app = root / "app.py"
    app.write_text(app_text(0, broken=()))
    return app


def app_text(version: int, broken: Sequence[str]) -> str:
    """`app.py`, different on every version, with the error each server in `broken` reports."""
    imports = "\n".join(f"from shop.m{n} import make{n}" for n in range(MODULES))
    body = "\n".join(f"    total += make{n}('x{version}').total({n})" for n in range(MODULES))
    text = f"{imports}\n\n\ndef main() -> float:\n    total = 0.0\n{body}\n    return total\n"
    if "ruff" in broken:
        text += f"\n\nprint(undefined_{version})\n"
    if "basedpyright" in broken:
        text += f'\n\ncount_{version}: int = "not a number"\n'
    return text


def expected(diagnostics: Sequence[Diagnostic], server: str) -> bool:
    codes = {d.code for d in diagnostics}
    return ("F821" in codes) if server == "ruff" else ("reportAssignmentType" in codes)


class Measurement:
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.failures = 0


async def check(
    pool: LspPool, app: Path, version: int, servers: Sequence[str], wait: float
) -> tuple[float, bool]:
    await trio.Path(app).write_text(app_text(version, broken=servers))
    started = time.perf_counter()
    found = await pool.diagnostics_after_edit([app], wait=wait)
    elapsed = time.perf_counter() - started
    return elapsed, all(expected(found, server) for server in servers)


async def cold(root: Path, server: str, runs: int) -> Measurement:
    result = Measurement()
    for run in range(runs):
        project = root / f"cold-{server}-{run}"
        project.mkdir()
        app = make_project(project)
        pool = LspPool(project, builtin=[server])
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.serve)
            seconds, ok = await check(pool, app, 1, [server], COLD_WAIT)
            nursery.cancel_scope.cancel()
        result.seconds.append(seconds)
        result.failures += not ok
    return result


async def warm(root: Path, servers: list[str], runs: int) -> Measurement:
    result = Measurement()
    project = root / f"warm-{'-'.join(servers)}"
    project.mkdir()
    app = make_project(project)
    pool = LspPool(project, builtin=servers)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        for version in range(1, 3):  # start, first analysis: not measured
            await check(pool, app, version, servers, COLD_WAIT)
        pids = {s.name: s.pid for s in pool.status()}
        for version in range(3, 3 + runs):
            seconds, ok = await check(pool, app, version, servers, WARM_WAIT)
            result.seconds.append(seconds)
            result.failures += not ok
        if {s.name: s.pid for s in pool.status()} != pids:
            print("  WARNING: a server restarted during the warm runs")
        nursery.cancel_scope.cancel()
    return result


def version_of(program: str, *args: str) -> str:
    try:
        out = subprocess.run(
            [program, *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.stdout or out.stderr else "?"


async def run(root: Path, runs: int, cold_runs: int) -> int:
    missed = 0
    for server in ("ruff", "basedpyright"):
        print()
        print(f"{server}: diagnostics after an edit of app.py (wall time of the pool call)")
        cold_result = await cold(root, server, cold_runs)
        warm_result = await warm(root, [server], runs)
        row(
            f"cold (start + initialize + first check), median of {cold_runs}",
            ms(median(cold_result.seconds)),
            note=f"min {ms(min(cold_result.seconds))}, max {ms(max(cold_result.seconds))}",
        )
        warm_median = median(warm_result.seconds)
        target = TARGETS[server]
        row(
            f"warm, median of {runs}",
            ms(warm_median),
            f"< {ms(target)}",
            verdict(warm_median, target),
        )
        row(
            "warm, p90 / max",
            ms(percentile(warm_result.seconds, 90)),
            note=f"max {ms(max(warm_result.seconds))}",
        )
        row("cold / warm", f"{median(cold_result.seconds) / warm_median:.0f}x")
        failures = cold_result.failures + warm_result.failures
        if failures:
            print(f"  FAILED: {failures} calls did not return the expected error")
        missed += failures + (warm_median >= target)
    print()
    print("ruff and basedpyright in one pool (one call waits for both)")
    both = await warm(root, ["ruff", "basedpyright"], runs)
    row(f"warm, median of {runs}", ms(median(both.seconds)), note=f"max {ms(max(both.seconds))}")
    if both.failures:
        print(f"  FAILED: {both.failures} calls did not return both errors")
    return 1 if missed or both.failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=15, help="warm edits (default 15)")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold starts (default 3)")
    args = parser.parse_args()
    handle_sigterm()
    print(f"language-server benchmark: {machine_line()}")
    print(f"  {load_line()}")
    for name, program, flag in (
        ("ruff", "ruff", "--version"),
        ("basedpyright", "basedpyright", "--version"),
    ):
        found = find_program(program)
        if found is None:
            print(f"{name} is not installed (a dev dependency); run `uv sync`")
            return 1
        print(f"  {name}: {found} ({version_of(found, flag)})")
    scratch = Path(tempfile.mkdtemp(prefix="tether-lsp-bench-"))
    try:
        return trio.run(run, scratch, args.runs, args.cold_runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
