"""CI (.ci/run) installs the same npm folders as the README's test command, each locked."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NPM_CI = re.compile(r"npm ci --prefix (\S+)")


def test_ci_and_the_readme_install_the_same_npm_folders() -> None:
    ci = NPM_CI.findall((ROOT / ".ci" / "run").read_text())
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.endswith("uv run --frozen pytest"))
    assert NPM_CI.findall(command) == ci
    assert "tests/lsp7" in ci
    for folder in ci:
        assert (ROOT / folder / "package.json").is_file(), folder
        assert (ROOT / folder / "package-lock.json").is_file(), folder
