"""The TypeScript client library (clients/typescript) drives the real daemon: its own
`node --test` suite, built from the current sources, run against daemons it starts itself
with the scripted model server."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"


@pytest.fixture
def node() -> str:
    node = shutil.which("node")
    assert node is not None, "Node.js (20 or later) is required for the TypeScript client tests"
    assert (PACKAGE / "node_modules" / "ws").is_dir(), (
        "run `npm ci --prefix clients/typescript` first (the README's test command does)"
    )
    return node


def _build(node: str) -> None:
    tsc = PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"
    built = subprocess.run(
        [node, str(tsc), "-p", str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]


def test_typescript_client_suite(node: str) -> None:
    _build(node)
    tests = sorted(str(p) for p in (PACKAGE / "dist" / "test").glob("*.test.js"))
    assert tests, "the build produced no tests"
    env = {**os.environ, "TETHER_PYTHON": sys.executable}
    result = subprocess.run(
        [node, "--test", "--test-concurrency=1", *tests],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
