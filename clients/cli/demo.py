"""`tether demo`: the whole product, end to end, before anything is configured.

It makes a scratch project, starts the scripted model server (the fake model the tests use)
and a real daemon for that project, and runs one turn through the normal client path: real
tools read real files. The model's part is scripted, and the demo says so.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_FILES = {
    "README.md": "# greeter\n\nA tiny library that greets people by name.\n",
    "greeter/__init__.py": "from greeter.core import greet\n",
    "greeter/core.py": (
        "def greet(name: str) -> str:\n"
        '    """Return a friendly greeting."""\n'
        '    return f"Hello, {name}!"\n'
    ),
}

DEMO_SCRIPT = {
    "steps": [
        {
            "text": "Let me look around the project first.\n",
            "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
        },
        {
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "README.md"}},
                {"name": "read_file", "arguments": {"path": "greeter/core.py"}},
            ]
        },
        {
            "text": (
                "This is `greeter`, a one-function library: `greet(name)` in "
                "greeter/core.py returns `Hello, {name}!`, and the package re-exports it."
            ),
            "chunks": 8,
            "chunk_delay_ms": 40,
        },
    ]
}

BANNER = (
    "tether demo: a real daemon, real tools and real files, with a SCRIPTED model standing in\n"
    "for a language model. To use a real one, see `tether run --help` and the README.\n"
)


def start_model_server(script_path: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.testing", "--script", str(script_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise RuntimeError("the scripted model server did not start")
    return proc, line.rsplit("listening on ", 1)[1].strip()


def make_project(root: Path) -> None:
    for name, text in DEMO_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".git").mkdir()  # marks the workspace root, as in a real checkout


def write_script(folder: Path) -> Path:
    path = folder / "demo-script.json"
    path.write_text(json.dumps(DEMO_SCRIPT))
    return path


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="tether-demo-")).resolve()


def cleanup(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
