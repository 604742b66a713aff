"""The repository layout maps onto the `tether` import package as pyproject.toml declares."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "protocol": "tether.protocol",
    "daemon": "tether.daemon",
    "daemon/testing": "tether.testing",
    "clients": "tether.clients",
    "clients/jupyter": "tether.jupyter",
}
"""Each mapped folder and its import package; a folder inside another is a package of its own."""


def _package_of(folder: Path) -> str:
    """The import package `folder` installs as, by the innermost mapped folder holding it."""
    rel = folder.relative_to(ROOT)
    for mapped in sorted(FOLDERS, key=len, reverse=True):
        parts = Path(mapped).parts
        if rel.parts[: len(parts)] == parts:
            return ".".join([FOLDERS[mapped], *rel.parts[len(parts) :]])
    raise AssertionError(f"{rel} is in no mapped folder")


def test_every_package_folder_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {v: k for k, v in FOLDERS.items()}
    found = {
        _package_of(init.parent)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
        if "node_modules" not in init.parts
    }
    assert set(config["packages"]) == found


def test_a_nested_mapping_names_its_folder_by_its_own_package() -> None:
    assert _package_of(ROOT / "daemon" / "testing") == "tether.testing"
    assert _package_of(ROOT / "daemon" / "testing" / "sub") == "tether.testing.sub"
    assert _package_of(ROOT / "daemon" / "tools") == "tether.daemon.tools"


def test_the_model_server_imports_from_any_folder(tmp_path: Path) -> None:
    """The editable install maps tether.testing, so it imports outside the checkout too."""
    out = subprocess.run(
        [sys.executable, "-c", "import tether.testing as t; print(t.ModelServer.__module__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert out == "tether.testing.server"


def test_cli_import_stays_thin() -> None:
    """The CLI's hot path must not pull in the daemon, trio, httpx or an HTTP parser (they
    cost ~0.25 s), nor subprocess, which only starting a daemon needs, nor rich, which only a
    terminal's renderer loads; nor platformdirs (tether.protocol.places resolves the folders),
    hashlib (OpenSSL, for one SHA-256) or shutil (which argparse's help width would load,
    with bz2 and lzma). Up to `tether run`'s first request (the renderer comes after it), not
    typing either: msgspec brings it once the turn's events are read."""
    code = (
        "import sys, tether.clients.cli.main, tether.clients.cli.commands.turns\n"
        "from tether.clients.cli.args import build_parser\n"
        "from tether.protocol.places import discovery_path\n"
        "build_parser(['run', 'go']).parse_args(['run', 'go']); discovery_path('/w')\n"
        "early = sorted(m for m in sys.modules if m.split('.')[0] == 'typing')\n"
        "import tether.clients.cli.render\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('trio', 'httpx', 'anyio', 'wsproto', 'h11', 'subprocess', 'rich', 'pygments',"
        " 'markdown_it', 'platformdirs', 'hashlib', '_hashlib', 'shutil', 'tempfile')"
        " or m.startswith('tether.daemon'))\n"
        "print(','.join(early + heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_the_cli_decides_to_spawn_a_daemon_before_its_heavy_imports(tmp_path: Path) -> None:
    """A first `tether run` waits for the daemon it starts, so the CLI spawns it as soon as
    it knows none runs: everything up to that decision (the arguments, the workspace, the
    lock probe) imports no msgspec (nor dataclasses and inspect, which it brings)."""
    code = (
        "import sys\n"
        "from tether.clients.cli.args import build_parser\n"
        "from tether.clients.cli.main import _start_daemon_early\n"
        "from tether.clients.cli.targets import workspace\n"
        "from tether.clients.core.discovery import probe_workspace\n"
        "args = build_parser().parse_args(['run', 'go'])\n"
        "assert probe_workspace(workspace(args)) is None\n"
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('msgspec', 'dataclasses', 'inspect')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert out == "[]"


def test_readme_config_example_is_valid(tmp_path: Path) -> None:
    import re

    from tether.daemon.config.settings import load_config

    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert match is not None
    path = tmp_path / "readme-config.toml"
    path.write_text(match.group(1))
    config = load_config(env={}, path=path)
    assert config.permissions.deny == ["run_command(git push *)"]
    assert [server.name for server in config.lsp] == ["zls"]
