"""The repository layout maps onto the `tether` import package as pyproject.toml declares."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"protocol": "tether.protocol", "daemon": "tether.daemon", "clients": "tether.clients"}


def test_every_package_folder_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {v: k for k, v in FOLDERS.items()}
    found: set[str] = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "node_modules" in init.parts:
                continue
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert set(config["packages"]) == found


def test_cli_import_stays_thin() -> None:
    """The CLI's hot path must not pull in the daemon, trio or httpx (they cost ~0.25 s)."""
    code = (
        "import sys, tether.clients.cli.main\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'httpx', 'anyio')"
        " or m.startswith('tether.daemon'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_readme_config_example_is_valid() -> None:
    import re

    from tether.daemon.config.settings import load_config

    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert match is not None
    path = ROOT / "build" / "readme-config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(match.group(1))
    config = load_config(env={}, path=path)
    assert config.permissions.deny == ["run_command(git push *)"]
    assert [server.name for server in config.lsp] == ["zls"]
