"""Making, diffing and removing a session's worktree of a 10,000-file repository.

Generates (in a temporary folder, removed afterwards) a git repository of N files (default
10,000, ~1 KB each, in folders of 100) with one commit, then, through the code the daemon runs
(`tether.daemon.worktrees.worktree`, guarded git in a subprocess), after one untimed warm-up
checkout, measures per run (alternating with a plain `git worktree add` for scale):
creating a worktree on a new branch (the checkout of every file), reading its changes after
one edit (`session/diff`: a throwaway index over the whole worktree), and removing it; and
the disk the worktree takes (its files; the objects are shared with the repository).
Target: a worktree of 10,000 files made in under 2 s.

Then the cost of a step inside a worktree session against the same step in a session on the
main checkout, from the daemon's own timestamps as `step_overhead.py` measures it (its
scripts: 1 step; 20 steps of read_file / list_dir; 20 steps of run_command `true`), with a
warm daemon on the repository. Per run, a new session on the main checkout and a new
`--worktree` session are made by an untimed first turn each (the worktree's checkout is not
what is measured) and written out to disk (`sync`); then `tether run --json -s` runs each
script in each session, alternating between them; both are deleted afterwards. Per step:
(turn time - the median 1-step turn time in the same kind of session) / 19. Target: a step
in a worktree session costs no more than one on the main checkout (the ratio of the medians
at most 1.1, for the runs' own noise).

Usage: python bench/worktrees.py [--files N] [--runs N]
"""

import argparse
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    BenchHome,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    row,
    run_cli,
    running_daemon,
    verdict,
)
from _turns import (
    SCRIPT_1,
    SCRIPT_20,
    SCRIPT_COMMANDS,
    TurnRun,
    marginal_steps,
    min_med,
    run_turn,
)
from tether.daemon.worktrees import worktree as wt
from tether.testing import ModelServer

TARGET_S = 2.0
TARGET_RATIO = 1.1


def generate(repo: Path, files: int) -> None:
    repo.mkdir(exist_ok=True)
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


def creation(repo: Path, scratch: Path, files: int, runs: int) -> None:
    made: list[float] = []
    diffed: list[float] = []
    removed: list[float] = []
    sizes: list[int] = []
    bare: list[float] = []
    # One untimed checkout first: the first reads the fresh repository from a cold cache,
    # which would count against whichever comes first. Then tether's and plain git's
    # alternate, so the machine's load falls on both alike.
    wt.remove(repo, wt.create(repo, scratch / "warm", "tether/warm"))
    # The fresh repository's writeback, and the deletions below, would otherwise land on the
    # timed checkouts (a checkout right after 10,000 deletions took 8 s here, 0.5 s without).
    os.sync()
    bare_folders: list[Path] = []
    for run in range(runs):
        folder = scratch / "bare" / f"b{run}"
        started = time.perf_counter()
        subprocess.run(["git", "worktree", "add", "-q", "-b", f"bare-{run}", str(folder)],
                       cwd=repo, check=True)  # fmt: skip
        bare.append(time.perf_counter() - started)
        bare_folders.append(folder)
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
    for folder in bare_folders:
        subprocess.run(["git", "worktree", "remove", str(folder)], cwd=repo, check=True)
    best = median(made)
    row(f"create a worktree of {files} files (median)", ms(best),
        f"< {TARGET_S:.0f} s", verdict(best, TARGET_S))  # fmt: skip
    row("plain `git worktree add`, for scale (median)", ms(median(bare)))
    row("its changes after one edit (median)", ms(median(diffed)))
    row("remove it (median)", ms(median(removed)))
    row("disk it takes (files; objects are shared)", f"{median(sizes) / 1024:.1f} MB")
    row(
        "the repository's own checkout, for scale",
        f"{(disk_kb(repo) - disk_kb(repo / '.git')) / 1024:.1f} MB",
    )


@dataclass
class Kind:
    """The turns of one kind of session, on the main checkout or in a worktree of its own,
    by script."""

    label: str
    options: tuple[str, ...]
    turns: dict[str, list[TurnRun]] = field(default_factory=dict[str, list[TurnRun]])


SCRIPTS: dict[str, tuple[dict[str, Any], int]] = {
    "1-step": (SCRIPT_1, 1),
    "read_file / list_dir": (SCRIPT_20, 20),
    "run_command `true`": (SCRIPT_COMMANDS, 20),
}


def one_turn(home: BenchHome, server: ModelServer, name: str, *options: str) -> TurnRun:
    script, steps = SCRIPTS[name]
    server.set_script(script)
    turn = run_turn(home, *options)
    got = len(server.requests)
    if got != steps:
        raise RuntimeError(f"expected {steps} model calls, the model server saw {got}")
    return turn


def session_pair(home: BenchHome, server: ModelServer, kinds: list[Kind]) -> None:
    """A new session of each kind (made by an untimed 1-step turn: a worktree's checkout is
    not what is measured), the checkout written out to disk (`sync`) so that it does not
    compete with the turns, then each script as a turn of its own in each session, the
    sessions alternating; they are deleted afterwards, with the worktree (the turns changed
    nothing)."""
    sessions = [one_turn(home, server, "1-step", *kind.options).session_id for kind in kinds]
    os.sync()
    for name in SCRIPTS:
        for kind, session in zip(kinds, sessions, strict=True):
            kind.turns.setdefault(name, []).append(one_turn(home, server, name, "-s", session))
    for session in sessions:
        deleted = run_cli(home, "sessions", "--delete", session, timeout=60)
        if deleted.returncode != 0:
            raise RuntimeError(f"deleting session {session}: {deleted.stderr.strip()}")


def step_costs(home: BenchHome, server: ModelServer, runs: int) -> None:
    kinds = [Kind("main checkout", ()), Kind("worktree session", ("--worktree", "bench"))]
    with running_daemon(home):
        # Warm-up: lazy imports, the HTTP connection pool, the store, the first worktree.
        session_pair(home, server, kinds)
        for kind in kinds:
            kind.turns.clear()
        for _ in range(runs):
            session_pair(home, server, kinds)
    print(f"  per step in the daemon, min / median of {runs} runs ((turn - 1-step turn) / 19):")
    for name in ("read_file / list_dir", "run_command `true`"):
        steps = [
            marginal_steps(kind.turns[name], median([t.turn_s for t in kind.turns["1-step"]]))
            for kind in kinds
        ]
        for kind, found in zip(kinds, steps, strict=True):
            row(f"    {name}, {kind.label}", min_med(found))
        ratio = median(steps[1]) / median(steps[0])
        row(f"    {name}: worktree / main, medians", f"{ratio:.2f}x",
            f"<= {TARGET_RATIO:g}x", verdict(ratio, TARGET_RATIO + 1e-9))  # fmt: skip
        row(f"    {name}: worktree / main, minimums", f"{min(steps[1]) / min(steps[0]):.2f}x")
    for kind in kinds:
        one_step = [turn.turn_s for turn in kind.turns["1-step"]]
        row(f"    1-step turn, {kind.label} (min / median)", min_med(one_step))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--files", type=int, default=10_000, help="files in the repository (default 10000)"
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="worktrees made, and session pairs the step scripts run in (default 3)",
    )
    args = parser.parse_args()
    handle_sigterm()
    print(f"worktrees: {machine_line()}; {load_line()}")
    begun = time.perf_counter()
    with model_server(SCRIPT_1) as server, bench_home(server.base_url) as home:
        repo = home.workspace
        started = time.perf_counter()
        generate(repo, args.files)
        print(f"  generated {args.files} files in {time.perf_counter() - started:.1f} s")
        creation(repo, home.root / "scratch", args.files, args.runs)
        step_costs(home, server, args.runs)
        print(f"  took {time.perf_counter() - begun:.0f} s; at the end: {load_line()}")


if __name__ == "__main__":
    main()
