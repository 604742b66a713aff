"""The VS Code extension (clients/vscode): its `npm test` — type check, bundles, the
`node --test` suites of the layer beneath VS Code against daemons they start themselves with
the scripted model server, and the .vsix's contents — built from the current sources of the
extension and of the client library it bundles."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "clients" / "vscode"
LIBRARY = ROOT / "clients" / "typescript"


@pytest.fixture
def npm() -> str:
    npm = shutil.which("npm")
    assert npm is not None, "Node.js 20 or later with npm is required for the VS Code extension"
    for package in (LIBRARY, EXTENSION):
        assert (package / "node_modules").is_dir(), (
            f"run `npm ci --prefix {package.relative_to(ROOT)}` first (.ci/run does)"
        )
    return npm


def test_vscode_extension_suite(npm: str) -> None:
    # The extension type-checks against the library's built declarations: build them first.
    built = subprocess.run(
        [npm, "run", "build", "--silent"],
        cwd=LIBRARY,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
    env = {**os.environ, "TETHER_PYTHON": sys.executable}
    result = subprocess.run(
        [npm, "test", "--silent"],
        cwd=EXTENSION,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
