"""What the permission gate's reading of a command costs: parsing it with tree-sitter-bash
into simple commands and words (`tether.daemon.turn.command_line.analyse`, uncached) and the
whole decision (`PermissionPolicy.decide` with a few allow and deny rules, the analysis cache
cleared each time), per command, over a mix of plain, compound and hostile command lines. The
first use imports tree-sitter: reported apart, in a fresh interpreter.

Usage: python bench/gate_parse.py [--runs N]
"""

import subprocess
import sys
import time

from _harness import load_line, machine_line, median, ms, row, runs_argument, verdict
from tether.daemon.turn.command_line import analyse, pattern_words
from tether.daemon.turn.permissions import CallFacts, PermissionPolicy

PARSE_TARGET = 0.0005
"""Seconds a command's analysis may take (median): a small part of a command step's 4 ms."""

COMMANDS = (
    "true",
    "git status --short",
    "npm run build -- --prod",
    "pytest tests/unit -q -k 'not slow'",
    "git -C sub log --oneline -n 20 | head -5",
    "cd src && grep -rn 'TODO' . > ../todo.txt",
    "python3 -c 'import sys; print(sys.version)'",
    "cat <<'EOF' > notes.txt\nline one\nline two\nEOF",
    "bash -c 'ls -la && echo done'",
    "npm run build =(touch x)",
    "find . -name '*.py' -exec grep -l x {} \\;",
    "for f in *.py; do echo $f; done",
)

IMPORT_CODE = (
    "import time\n"
    "from tether.daemon.turn.command_line import analyse\n"
    "t = time.perf_counter()\n"
    "analyse('git status')\n"
    "print(time.perf_counter() - t)\n"
)


def per_command(runs: int, action: object) -> float:
    """Median seconds of one call of `action` per command, over `runs` rounds of all."""
    assert callable(action)
    times: list[float] = []
    for _ in range(runs):
        for command in COMMANDS:
            analyse.cache_clear()
            started = time.perf_counter()
            action(command)
            times.append(time.perf_counter() - started)
    return median(times)


def main() -> None:
    runs = runs_argument(__doc__, 200, "rounds over the commands")
    print(f"gate parse: {machine_line()}\n{load_line()}")
    first = subprocess.run(
        [sys.executable, "-c", IMPORT_CODE], capture_output=True, text=True, check=True
    )
    policy = PermissionPolicy(
        mode="edits",
        allow=["run_command(git status *)", "run_command(npm run build *)", "run_command(ls *)"],
        deny=["run_command(git push *)", "run_command(rm -rf *)"],
    )
    for rule in (*policy.allow, *policy.deny):
        pattern_words(rule.partition("(")[2].removesuffix(")"))  # parsed once per rule

    def decide(command: str) -> None:
        policy.decide(CallFacts(tool="run_command", kind="command", command=command))

    analyse("warm")
    parse = per_command(runs, analyse)
    decision = per_command(runs, decide)
    print(f"\nper command, median over {runs} rounds of {len(COMMANDS)} command lines")
    target = f"< {PARSE_TARGET * 1e6:g} µs"
    row("parse into simple commands and words", us(parse), target, verdict(parse, PARSE_TARGET))
    row("the gate's whole decision (parse included)", us(decision))
    row("the first command of a process (imports tree-sitter)", ms(float(first.stdout)))


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


if __name__ == "__main__":
    main()
