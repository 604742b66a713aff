"""The code-intelligence tools on a warm basedpyright: latency of each tool, and what a
references answer costs the model against grep's.

A generated Python project of about 20,000 lines (`--modules` modules of ~200 lines, default
100): `billing.py` defines `compute_total`, every module imports it and calls it three times,
and ten `inventory_*.py` modules define and call an unrelated `compute_total` of their own (the
namesakes grep cannot tell apart).
The tools run as the daemon runs them (the tool classes, a `ToolContext` holding an
`LspPool`), against one warm pool: after a first call of each tool (unmeasured: the server
indexes), each is timed `--runs` times (default 15):

- find_definition, find_references, hover: from a call site in the last module
  (target: median <= 200 ms);
- symbols: a workspace search for `compute_total`, and one module's outline;
- rename_symbol: its preview (the server's rename, every file read and the diff made; nothing
  is written).

Then the bytes the model is given for the uses of `compute_total`: find_references' answer
(its default limit of 50) against grep's content-mode answer for `\\bcompute_total\\b` (its
default head_limit of 100), with how many true uses each names.

Usage: python bench/code_intel.py [--runs N] [--modules N]
Takes about 30-60 s on a 2-core machine (basedpyright's first analysis is most of it).
"""

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from _harness import handle_sigterm, load_line, machine_line, median, ms, percentile, row, verdict
from tether.daemon.lsp.pool import LspPool
from tether.daemon.tools.base import ToolContext, ToolFailure
from tether.daemon.tools.code_intel import LSP_SERVICE, SymbolAtParams
from tether.daemon.tools.find_definition import FindDefinition
from tether.daemon.tools.find_references import FindReferences, FindReferencesParams
from tether.daemon.tools.grep import Grep, GrepParams
from tether.daemon.tools.hover import Hover
from tether.daemon.tools.rename_symbol import RenameSymbol, RenameSymbolParams
from tether.daemon.tools.symbols import Symbols, SymbolsParams

TARGET = 0.200
CALLS_PER_MODULE = 3
FILLER_FUNCTIONS = 23
"""Functions per module besides the calls: ~9 lines each, so a module is ~200 lines."""

BILLING = '''\
def compute_total(prices: list[float], tax: float = 0.2) -> float:
    """The sum of `prices` with `tax` added."""
    return sum(prices) * (1 + tax)
'''


def make_project(root: Path, modules: int) -> tuple[int, str]:
    """Write the project; return its line count and the module the calls are made from."""
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n')
    (root / "billing.py").write_text(BILLING)
    lines = BILLING.count("\n")
    for n in range(modules):
        parts = ["from billing import compute_total\n\n"]
        for f in range(FILLER_FUNCTIONS):
            parts.append(
                f"\ndef helper_{n}_{f}(values: list[float]) -> float:\n"
                f'    """Helper {f} of module {n}."""\n'
                f"    result = 0.0\n"
                f"    for value in values:\n"
                f"        result += value * {f + 1}\n"
                f"    return result\n\n"
            )
        for c in range(CALLS_PER_MODULE):
            parts.append(
                f"\ndef checkout_{n}_{c}(prices: list[float]) -> float:\n"
                f"    return compute_total(prices, tax=0.{c})\n\n"
            )
        text = "".join(parts)
        (root / f"module_{n:03}.py").write_text(text)
        lines += text.count("\n")
    for n in range(5, modules, 10):
        # Unrelated same-named functions in separate modules: grep finds them, references not.
        other = (
            f"def compute_total(count: int) -> int:\n    return count\n\n\nX = compute_total({n})\n"
        )
        (root / f"inventory_{n:03}.py").write_text(other)
        lines += other.count("\n")
    return lines, f"module_{modules - 1:03}.py"


async def timed(call: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    seconds: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - start)
    return seconds


async def until_indexed(call: Callable[[], Awaitable[object]]) -> float:
    """Call until the server has indexed the project; return the seconds that took."""
    start = time.perf_counter()
    while True:
        try:
            await call()
        except ToolFailure as exc:
            if "still indexing" not in str(exc):
                raise
            await trio.sleep(0.2)
            continue
        return time.perf_counter() - start


async def bench(root: Path, module: str, runs: int) -> int:
    pool = LspPool(root, builtin=["basedpyright"], request_timeout=60.0)
    ctx = ToolContext(root, services={LSP_SERVICE: pool})
    text = (root / module).read_text().splitlines()
    call_line = next(i for i, line in enumerate(text, 1) if "return compute_total(" in line)
    at = SymbolAtParams(path=module, line=call_line, symbol="compute_total")
    refs = FindReferencesParams(path=module, line=call_line, symbol="compute_total")
    rename = RenameSymbolParams(
        path=module, line=call_line, symbol="compute_total", new_name="grand_total"
    )
    cases: list[tuple[str, Callable[[], Awaitable[object]], bool]] = [
        ("find_definition", lambda: FindDefinition().run(at, ctx), True),
        ("find_references", lambda: FindReferences().run(refs, ctx), True),
        ("hover", lambda: Hover().run(at, ctx), True),
        (
            "symbols (workspace search)",
            lambda: Symbols().run(SymbolsParams(query="compute_total", path=module), ctx),
            False,
        ),
        (
            "symbols (outline of a module)",
            lambda: Symbols().run(SymbolsParams(path=module), ctx),
            False,
        ),
        ("rename_symbol (preview)", lambda: RenameSymbol().preview(rename, ctx), False),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        first = await until_indexed(cases[0][1])
        print()
        print(f"first find_definition, the server starting and indexing: {first:.1f} s")
        print()
        print(f"latency of each tool on the warm server, {runs} runs (after one unmeasured)")
        missed = 0
        for label, call, targeted in cases:
            await until_indexed(call)
            seconds = await timed(call, runs)
            middle, p95 = median(seconds), percentile(seconds, 95)
            target = f"<= {ms(TARGET)} median" if targeted else ""
            note = f"p95 {ms(p95)}"
            if targeted:
                note += f"  {verdict(middle, TARGET + 1e-9)}"
                missed += middle > TARGET
            row(label, ms(middle), target, note)
        answer = await FindReferences().run(refs, ctx)
        grepped = await Grep().run(
            GrepParams(pattern=r"\bcompute_total\b", output_mode="content"), ctx
        )
        nursery.cancel_scope.cancel()
    grep_text = grepped if isinstance(grepped, str) else grepped.text
    uses = int(answer.split(" ", 1)[0])
    grep_lines = [line for line in grep_text.splitlines() if ":" in line]
    true_in_grep = sum(1 for line in grep_lines if not line.startswith("inventory_"))
    print()
    print("what the model is given for the uses of compute_total")
    row(
        "find_references answer",
        f"{len(answer.encode()):,} B",
        note=f"{uses} uses counted, {min(uses, 50)} shown, namesakes left out",
    )
    row(
        "grep content answer (default head_limit)",
        f"{len(grep_text.encode()):,} B",
        note=f"{len(grep_lines)} lines, {len(grep_lines) - true_in_grep} of them namesakes",
    )
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--modules", type=int, default=100)
    args = parser.parse_args()
    handle_sigterm()
    print(f"code-intelligence benchmark: {machine_line()}")
    print(f"  {load_line()}")
    root = Path(tempfile.mkdtemp(prefix="tether-code-intel-")).resolve()
    try:
        lines, module = make_project(root, args.modules)
        print(f"  project: {args.modules} modules, {lines:,} lines; calls from {module}")
        missed = trio.run(bench, root, module, args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if missed:
        print(f"  {missed} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
