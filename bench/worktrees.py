"""Making, diffing and removing a session's worktree of a 10,000-file repository.

Generates (in a temporary folder, removed afterwards) a git repository of N files (default
10,000, ~1 KB each, in folders of 100) with one commit, then, through the code the daemon runs
(`tether.daemon.worktrees.worktree`, guarded git in a subprocess), after one untimed warm-up
checkout, measures per run (alternating with a plain `git worktree add` for scale):
creating a worktree on a new branch (the checkout of every file), reading its changes after
one edit (`session/diff`: a throwaway index over the whole worktree), and removing it; and
the disk the worktree takes (its files; the objects are shared with the repository).
Target: a worktree of 10,000 files made in under 2 s.

Usage: python bench/worktrees.py [--files N] [--runs N]
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _harness import handle_sigterm, load_line, machine_line, median, ms, row, verdict
from tether.daemon.worktrees import worktree as wt

TARGET_S = 2.0


def generate(repo: Path, files: int) -> None:
    repo.mkdir()
    line = "x = 1  # " + "a" * 60 + "\n"
    for index in range(files):
        folder = repo / f"pkg{index // 100:03}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{index % 100:02}.py").write_text(line * 14)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "files"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)


def disk_kb(folder: Path) -> int:
    return sum(
        (path.stat().st_blocks * 512) // 1024 for path in folder.rglob("*") if path.is_file()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    handle_sigterm()
    print(f"worktrees: {machine_line()}; {load_line()}")
    scratch = Path(tempfile.mkdtemp(prefix="tether-bench-worktrees-"))
    try:
        repo = scratch / "repo"
        started = time.perf_counter()
        generate(repo, args.files)
        print(f"  generated {args.files} files in {time.perf_counter() - started:.1f} s")
        made: list[float] = []
        diffed: list[float] = []
        removed: list[float] = []
        sizes: list[int] = []
        bare: list[float] = []
        # One untimed checkout first: the first reads the fresh repository from a cold cache,
        # which would count against whichever comes first. Then tether's and plain git's
        # alternate, so the machine's load falls on both alike.
        wt.remove(repo, wt.create(repo, scratch / "warm", "tether/warm"))
        for run in range(args.runs):
            folder = scratch / "bare" / f"b{run}"
            started = time.perf_counter()
            subprocess.run(["git", "worktree", "add", "-q", "-b", f"bare-{run}", str(folder)],
                           cwd=repo, check=True)  # fmt: skip
            bare.append(time.perf_counter() - started)
            folder = scratch / "trees" / f"s{run}"
            started = time.perf_counter()
            tree = wt.create(repo, folder, f"tether/bench-{run}")
            made.append(time.perf_counter() - started)
            sizes.append(disk_kb(folder))
            (folder / "pkg000" / "mod00.py").write_text("changed\n")
            started = time.perf_counter()
            changes = wt.changes(tree)
            diffed.append(time.perf_counter() - started)
            assert [f.path for f in changes.files] == ["pkg000/mod00.py"]
            started = time.perf_counter()
            wt.remove(repo, tree)
            removed.append(time.perf_counter() - started)
        best = median(made)
        row(f"create a worktree of {args.files} files (median)", ms(best),
            f"< {TARGET_S:.0f} s", verdict(best, TARGET_S))  # fmt: skip
        row("plain `git worktree add`, for scale (median)", ms(median(bare)))
        row("its changes after one edit (median)", ms(median(diffed)))
        row("remove it (median)", ms(median(removed)))
        row("disk it takes (files; objects are shared)", f"{median(sizes) / 1024:.1f} MB")
        row(
            "the repository's own checkout, for scale",
            f"{(disk_kb(repo) - disk_kb(repo / '.git')) / 1024:.1f} MB",
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
