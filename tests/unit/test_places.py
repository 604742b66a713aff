"""Where daemon and clients meet on disk (tether.protocol.places): the XDG folders computed
without platformdirs on Linux must be the ones platformdirs gives, so an upgrade moves no
user's sessions, and the runtime dir must never be one another user could read or swap."""

import os
import sys
import tempfile
import warnings
from pathlib import Path

import platformdirs
import pytest

from tether.protocol import places
from tether.protocol.workspace_files import workspace_key

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG rules")

XDG = ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "TMPDIR")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in XDG:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    # platformdirs takes $TMPDIR through tempfile, which keeps what it first found.
    monkeypatch.setattr(tempfile, "tempdir", None)
    return monkeypatch


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


def theirs() -> dict[str, Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when it falls back
        return {
            "runtime": Path(platformdirs.user_runtime_dir("tether")),
            "data": Path(platformdirs.user_data_dir("tether")),
            "config": Path(platformdirs.user_config_dir("tether")),
            "state": Path(platformdirs.user_state_dir("tether")),
            "log": Path(platformdirs.user_log_dir("tether")),
        }


def ours() -> dict[str, Path]:
    return {
        "runtime": places.runtime_dir(),
        "data": places.data_dir(),
        "config": places.config_dir(),
        "state": places.state_dir(),
        "log": places.log_dir(),
    }


@pytest.mark.parametrize(
    "setting",
    ["nothing", "every variable", "relative variables", "wide runtime dir", "symlinked runtime"],
)
def test_the_folders_are_the_ones_platformdirs_gives(
    setting: str, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if setting == "every variable":
        env.setenv("XDG_RUNTIME_DIR", str(private(tmp_path / "run")))
        for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            env.setenv(name, str(tmp_path / name.lower()))
    elif setting == "relative variables":
        env.setenv("XDG_RUNTIME_DIR", "run")
        env.setenv("XDG_DATA_HOME", "data")
    elif setting == "wide runtime dir":
        (tmp_path / "run").mkdir(mode=0o755)
        (tmp_path / "run").chmod(0o755)
        env.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    elif setting == "symlinked runtime":
        (tmp_path / "link").symlink_to(private(tmp_path / "run"))
        env.setenv("XDG_RUNTIME_DIR", str(tmp_path / "link"))
    assert ours() == theirs()


def test_a_fit_runtime_dir_holds_the_discovery_files(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setenv("XDG_RUNTIME_DIR", str(private(tmp_path / "run")))
    workspace = tmp_path / "project"
    assert places.discovery_path(workspace).parent == tmp_path / "run" / "tether"
    assert places.log_path(workspace).parent == tmp_path / "home" / ".local/state/tether/log"


@pytest.mark.parametrize("runtime", ["fit", "unset", "wide"])
def test_the_lock_is_beside_the_database_whatever_the_runtime_dir(
    runtime: str, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two shells of one user that pick different runtime dirs must find one lock.
    if runtime == "fit":
        env.setenv("XDG_RUNTIME_DIR", str(private(tmp_path / "run")))
    elif runtime == "wide":
        (tmp_path / "wide").mkdir(mode=0o755)
        (tmp_path / "wide").chmod(0o755)
        env.setenv("XDG_RUNTIME_DIR", str(tmp_path / "wide"))
    workspace = "/srv/project"
    key = workspace_key(workspace)
    folder = tmp_path / "home" / ".local/share/tether/workspaces" / key
    assert places.workspace_data_dir(workspace) == folder
    assert places.lock_path(workspace) == folder / "daemon.lock"


def test_a_missing_runtime_dir_is_neither_created_nor_repaired(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What happens to /run/user/UID at logout: the rule passes over it, and creates only
    # the temporary fallback, owner-only.
    gone = tmp_path / "run" / "user" / "1000"
    env.setenv("XDG_RUNTIME_DIR", str(gone))
    chosen = places.runtime_dir()
    assert not (tmp_path / "run").exists()
    assert chosen == tmp_path / "tmp" / f"runtime-{os.geteuid()}" / "tether"


@pytest.mark.parametrize("unfit", ["wide", "symlink", "file", "missing"])
def test_an_unfit_runtime_dir_is_passed_over_for_a_private_temporary_one(
    unfit: str, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    if unfit == "wide":
        run.mkdir(mode=0o755)
        run.chmod(0o755)
    elif unfit == "symlink":
        run.symlink_to(private(tmp_path / "real"))
    elif unfit == "file":
        run.write_text("")
    env.setenv("XDG_RUNTIME_DIR", str(run))
    chosen = places.runtime_dir()
    assert chosen.parent == tmp_path / "tmp" / f"runtime-{os.geteuid()}"
    assert (chosen.parent.stat().st_mode & 0o777) == 0o700


def test_a_temporary_runtime_dir_left_wide_is_tightened(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    left = tmp_path / "tmp" / f"runtime-{os.geteuid()}"
    left.mkdir(mode=0o755)
    left.chmod(0o755)
    assert places.runtime_dir() == left / "tether"
    assert (left.stat().st_mode & 0o777) == 0o700


def test_a_temporary_runtime_dir_that_is_a_symlink_is_refused(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "tmp" / f"runtime-{os.geteuid()}").symlink_to(private(tmp_path / "elsewhere"))
    with pytest.raises(PermissionError, match="set XDG_RUNTIME_DIR"):
        places.runtime_dir()


def test_a_temporary_folder_anyone_may_rename_in_is_refused(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # World-writable without the sticky bit: another user could move runtime-<uid> away and
    # put their own in its place.
    (tmp_path / "tmp").chmod(0o777)
    with pytest.raises(PermissionError, match="others can replace"):
        places.runtime_dir()
    assert not (tmp_path / "tmp" / f"runtime-{os.geteuid()}").exists()


def test_a_relative_home_falls_back_to_the_password_database(env: pytest.MonkeyPatch) -> None:
    import pwd

    env.setenv("HOME", "relative")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert places.config_dir() == home / ".config" / "tether"
    assert places.config_dir() == theirs()["config"]


def test_the_workspace_key_is_the_sha256_every_client_computes() -> None:
    # The editor clients name the discovery file from the same 16 hex digits of SHA-256.
    import hashlib

    from tether.protocol.workspace_files import discovery_name, workspace_key

    for workspace in ("/home/me/project", "/srv/ü ñ/x", "/"):
        digest = hashlib.sha256(workspace.encode()).hexdigest()[:16]
        assert workspace_key(workspace) == digest
        assert discovery_name(workspace) == f"daemon-{digest}.json"
