"""Every Python process tether starts by module name runs with `-P` (or `-I`): `python -m`
otherwise puts its working folder first on the module path, and tether's processes run in the
workspace, so a repository holding a `tether` package would have its code run by the first
command (tests/e2e/test_workspace_python.py shows it). This test reads the sources of everything
that starts one (the daemon, the clients in Python, TypeScript and Lua, the container image, the
tests, the benchmarks) so that a new spawn site cannot forget the flag."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("daemon", "clients", "packaging", "tests", "bench")
SUFFIXES = {".py", ".ts", ".lua", ".js", ".json", ""}
SKIPPED = {"node_modules", "dist", "out", "__pycache__"}
THIS_FILE = Path(__file__).resolve()
"""Left out: its examples of unsafe runs are there to be found."""

MODULE_FLAG = re.compile(r"""(["'])-m\1""")
"""`"-m"` as an element of an argument list (Python, TypeScript, Lua, a Containerfile's JSON)."""
MODULE_IN_LINE = re.compile(r"\}\s+-m\s")
"""`{python} -m ...` in a command line built as a string."""
SAFE_BEFORE = re.compile(r"""(["'])-[PI]\1\s*,\s*$|\s-[PI]\s+$""")
PYTHON_NAMED = re.compile(r"python|executable|interpreter", re.IGNORECASE)
"""A `-m` is Python's when Python is named just before it (another program's `-m`, git's
commit message or tether's own `--message`, comes with no Python in sight)."""
ON_PURPOSE = {"tests/e2e/test_workspace_python.py": 2}
"""Runs without `-P` that show what it prevents, counted: a third one there is not on purpose."""


def names_python(text: str, start: int) -> bool:
    """Whether Python is named in the 200 characters before `start`."""
    return PYTHON_NAMED.search(text[max(0, start - 200) : start]) is not None


def spawn_files() -> list[Path]:
    found: list[Path] = []
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            relative = path.relative_to(ROOT).parts
            if SKIPPED.intersection(relative) or not path.is_file() or path == THIS_FILE:
                continue
            if path.suffix in SUFFIXES and (path.suffix or path.name == "Containerfile"):
                found.append(path)
    return sorted(found)


def unsafe_module_runs(text: str) -> list[int]:
    """The line numbers where `text` runs Python by module name without `-P`/`-I` just
    before `-m` (a `-m` with no Python named just before it is another program's)."""
    lines: list[int] = []
    for pattern in (MODULE_FLAG, MODULE_IN_LINE):
        for match in pattern.finditer(text):
            start = match.start() + (1 if pattern is MODULE_IN_LINE else 0)
            if not names_python(text, start):
                continue
            if not SAFE_BEFORE.search(text[max(0, start - 40) : start]):
                lines.append(text.count("\n", 0, start) + 1)
    return sorted(lines)


def test_every_python_run_by_module_name_keeps_its_folder_off_the_path() -> None:
    files = spawn_files()
    names = {path.relative_to(ROOT).as_posix() for path in files}
    # The sites known today are among those read, so a moved file cannot slip out of it.
    assert {
        "clients/core/discovery.py",
        "clients/typescript/src/node.ts",
        "clients/typescript/src/testing.ts",
        "packaging/Containerfile",
        "clients/nvim/lua/tether/bridge.lua",
        "tests/support.py",
        "tests/unit/test_model_server.py",
        "tests/e2e/test_remote.py",
        "bench/_harness.py",
    } <= names
    unsafe = {
        path.relative_to(ROOT).as_posix(): lines
        for path in files
        if (lines := unsafe_module_runs(path.read_text(errors="replace")))
    }
    assert {name: len(unsafe.pop(name, [])) for name in ON_PURPOSE} == ON_PURPOSE
    assert unsafe == {}, "run Python with -P (or -I) right before -m at these lines"


def test_the_scan_sees_each_way_a_module_is_run() -> None:
    assert unsafe_module_runs('run_git(root, "commit-tree", tree,\n    "-m", message)') == []
    assert unsafe_module_runs('run_git(root, [sys.executable, "-m", "x"])') == [1]
    assert unsafe_module_runs('spawn(python, ["-m", "tether.daemon"])') == [1]
    assert unsafe_module_runs('[sys.executable,\n    "-m", "tether.daemon"]') == [2]
    assert unsafe_module_runs("'python', '-m', 'x'") == [1]
    assert unsafe_module_runs('f"env A=1 {python} -m tether.clients.cli.main"') == [1]
    assert unsafe_module_runs('[sys.executable, "-P", "-m", "tether.daemon"]') == []
    assert unsafe_module_runs('{ "python", "-I", "-m", "x" }') == []
    assert unsafe_module_runs('f"{python} -P -m tether.clients.cli.main"') == []
    assert unsafe_module_runs('parser.add_argument("--message", "-m")') == []
    assert unsafe_module_runs('git(repo, "commit", "--quiet", "-m", "first")') == []
    assert unsafe_module_runs('cli(home, "deny", "-w", str(workspace), "-m", "no")') == []
    assert unsafe_module_runs('[sys.executable, "-X", "importtime", "-m", "x"]') == [1]
