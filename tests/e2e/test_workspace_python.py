"""A workspace's own Python never runs in tether's processes. The workspace built here holds a
`tether` package shadowing the modules tether's entry points run; each of its modules appends
to a marker file when imported. The daemon is started each way a user's command starts it (the
TypeScript library's autostart is in clients/typescript/test/workspace_python.test.ts, the
container's command in test_container_command.py), and serves without the marker appearing."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import Home, plant_shadowing_package, run_installed


def hostile_workspace(root: Path) -> tuple[Path, Path]:
    """A git workspace under `root` whose `tether` package writes to the returned marker."""
    workspace = (root / "project").resolve()
    (workspace / ".git").mkdir(parents=True)
    marker = root / "marker"
    plant_shadowing_package(workspace, marker)
    return workspace, marker


@pytest.mark.parametrize(
    "command",
    [("sessions",), ("daemon", "start")],
    ids=["autostart", "daemon-start"],
)
def test_a_daemon_a_command_starts_imports_nothing_of_the_workspace(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    home = Home(tmp_path)
    workspace, marker = hostile_workspace(tmp_path)
    try:
        done = run_installed(home.env, *command, cwd=workspace)
        serving = home.read_discovery(workspace)
    finally:
        stopped = run_installed(home.env, "daemon", "stop", cwd=workspace)
    assert not marker.exists(), f"the workspace's code ran: {marker.read_text()}"
    assert done.returncode == 0, done.stderr
    assert serving is not None, "no daemon served the workspace"
    assert stopped.returncode == 0, stopped.stderr


def test_the_workspace_package_would_run_on_the_path_python_m_gives(tmp_path: Path) -> None:
    """The hostile workspace is hostile: without `-P`, `python -m` from it runs its code."""
    workspace, marker = hostile_workspace(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "tether.daemon", "--help"],
        cwd=workspace,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert marker.exists()


def test_the_daemon_refuses_to_run_with_its_folder_on_the_module_path(tmp_path: Path) -> None:
    home = Home(tmp_path)
    workspace = (tmp_path / "project").resolve()
    workspace.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "tether.daemon", "--workspace", str(workspace)],
        env=home.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("tether daemon: run it as `python -P -m tether.daemon`")
    assert home.read_discovery(workspace) is None
    isolated = subprocess.run(
        [sys.executable, "-I", "-m", "tether.daemon", "--workspace", str(tmp_path / "none")],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "is not a directory" in isolated.stderr  # -I implies -P: past the check
