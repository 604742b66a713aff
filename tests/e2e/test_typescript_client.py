"""The TypeScript clients drive the real daemon: the client library (clients/typescript) with
its own `node --test` suite, and the VS Code extension (clients/vscode) with its `npm test` —
type check, bundles, the `node --test` suites of the layer beneath VS Code, and the .vsix's
contents. Both are built from the current sources and run against daemons they start
themselves with the scripted model server.

One module, so that one worker builds the library once for both: two builds at once would
write the same `dist/` under each other's readers. Once it is built, the extension's suite runs
alongside the library's (each starts its own daemons in homes of its own): both mostly wait on
those daemons, so together they take little longer than the longer one alone."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "clients" / "typescript"
EXTENSION = ROOT / "clients" / "vscode"


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    assert node is not None, "Node.js (20 or later) is required for the TypeScript client tests"
    for package in (LIBRARY, EXTENSION):
        assert (package / "node_modules").is_dir(), (
            f"run `npm ci --prefix {package.relative_to(ROOT)}` first (.ci/run does)"
        )
    return node


@pytest.fixture(scope="module")
def library(node: str) -> Path:
    """The library built (`dist/`, with the declarations the extension type-checks against)."""
    tsc = LIBRARY / "node_modules" / "typescript" / "bin" / "tsc"
    built = subprocess.run(
        [node, str(tsc), "-p", str(LIBRARY)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
    return LIBRARY / "dist"


@pytest.fixture(scope="module")
def extension_suite(library: Path) -> Iterator[tuple[subprocess.Popen[bytes], IO[bytes]]]:
    """The VS Code extension's `npm test`, started as soon as the library is built; its output
    goes to a temporary file (a pipe nobody reads while the library's suite runs would fill)."""
    npm = shutil.which("npm")
    assert npm is not None, "Node.js 20 or later with npm is required for the VS Code extension"
    env = {**os.environ, "TETHER_PYTHON": sys.executable}
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(
            [npm, "test", "--silent"],
            cwd=EXTENSION,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its group, node and all, is killed if it is left running
        )
        try:
            yield proc, output
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_typescript_client_suite(
    node: str, library: Path, extension_suite: tuple[subprocess.Popen[bytes], IO[bytes]]
) -> None:
    del extension_suite  # started first, to run alongside
    tests = sorted(str(p) for p in (library / "test").glob("*.test.js"))
    assert tests, "the build produced no tests"
    env = {**os.environ, "TETHER_PYTHON": sys.executable}
    result = subprocess.run(
        [node, "--test", "--test-concurrency=1", *tests],
        cwd=LIBRARY,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


def test_vscode_extension_suite(
    extension_suite: tuple[subprocess.Popen[bytes], IO[bytes]],
) -> None:
    proc, output = extension_suite
    code = proc.wait(timeout=600)
    output.seek(0)
    said = output.read().decode(errors="replace")
    assert code == 0, said[-9000:]
