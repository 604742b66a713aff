"""Peak memory and time of the `glob` tool over 100,000 files.

Generates (in a temporary folder, removed afterwards) two trees of 100,000 empty files each:
`nested/` (1,000 folders of 100 files) and `flat/` (one folder), and runs `glob` in a fresh
child process per measurement, which reports its peak RSS (VmHWM) minus its RSS just before
the call, and the call's wall time. Cases: `**/*` in `nested/` (every file matches; the tool
shows the newest 200), `**/*.py` in `nested/` (one file in ten) and `*` in `flat/`.
Target: the peak grows by at most 10 MB whatever the number of matches, since glob keeps only
the entries it will show.

Usage: python bench/glob_memory.py [--files N] [--runs N]
Takes under a minute on a 2-core machine (most of it creating the files).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import (
    handle_sigterm,
    load_line,
    machine_line,
    mb,
    median,
    ms,
    proc_status_kb,
    row,
    verdict,
)

PER_FOLDER = 100
TARGET_KB = 10 * 1024


def generate(root: Path, files: int) -> None:
    """`nested/`: folders of 100 files; `flat/`: all the files in one folder. One file in ten
    is a `.py` file."""
    flat = root / "flat"
    flat.mkdir(parents=True)
    for index in range(files):
        (flat / f"f{index:06}.{'py' if index % 10 == 0 else 'txt'}").touch()
    for start in range(0, files, PER_FOLDER):
        folder = start // PER_FOLDER
        parent = root / "nested" / f"pkg{folder // 100:03}" / f"mod{folder % 100:02}"
        parent.mkdir(parents=True)
        for index in range(min(PER_FOLDER, files - start)):
            (parent / f"f{index:03}.{'py' if index % 10 == 0 else 'txt'}").touch()


def child(root: str, pattern: str) -> None:
    """In the child process: one glob call; prints {rss_delta_kb, seconds, last_line}."""
    import trio

    from tether.daemon.tools.base import ToolContext
    from tether.daemon.tools.glob import Glob, GlobParams

    tool = Glob()
    ctx = ToolContext(Path(root))
    params = GlobParams(pattern=pattern)
    before = proc_status_kb(os.getpid(), "VmRSS")
    start = time.perf_counter()
    output = trio.run(tool.run, params, ctx)
    seconds = time.perf_counter() - start
    peak = proc_status_kb(os.getpid(), "VmHWM")
    last = output.splitlines()[-1]
    print(json.dumps({"rss_delta_kb": peak - before, "seconds": seconds, "last": last}))


def measure(root: Path, pattern: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(root), pattern],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result  # type: ignore[return-value]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=100_000, help="files (default 100,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "PATTERN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    handle_sigterm()
    print(f"glob memory benchmark: {machine_line()}")
    print(f"  {load_line()}")
    scratch = Path(tempfile.mkdtemp(prefix="tether-glob-bench-"))
    try:
        started = time.perf_counter()
        generate(scratch, args.files)
        print(
            f"  generated 2 x {args.files:,} empty files in {time.perf_counter() - started:.1f} s"
        )
        worst = 0
        for tree, pattern in (("nested", "**/*"), ("nested", "**/*.py"), ("flat", "*")):
            results = [measure(scratch / tree, pattern) for _ in range(args.runs)]
            deltas = [int(str(r["rss_delta_kb"])) for r in results]
            seconds = [float(str(r["seconds"])) for r in results]
            delta = int(median(deltas))
            worst = max(worst, delta)
            row(
                f"glob {pattern} in {tree}/: peak RSS growth",
                mb(delta),
                f"<= {mb(TARGET_KB)}",
                verdict(delta, TARGET_KB + 1),
            )
            row("    time", ms(median(seconds)), note=str(results[-1]["last"])[:60])
        print()
        print(f"  worst peak RSS growth {mb(worst)} (target <= {mb(TARGET_KB)})")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
