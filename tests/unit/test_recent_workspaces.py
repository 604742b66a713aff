"""The recent workspaces list the daemon keeps for `tether web` (tether.daemon.server.recent)."""

import stat
from pathlib import Path

import msgspec

from tether.daemon.server.recent import KEEP, read_roots, remember
from tether.protocol.discovery import RecentWorkspaces


def test_a_workspace_goes_first_once_and_the_list_stays_small_and_private(tmp_path: Path) -> None:
    recent = tmp_path / "state" / "recent-workspaces.json"
    folders = [tmp_path / f"w{i}" for i in range(KEEP + 5)]
    for folder in folders:
        folder.mkdir()
        remember(folder, recent)
    remember(folders[3], recent)
    roots = read_roots(recent)
    assert roots[0] == str(folders[3])
    assert len(roots) == KEEP
    assert len(set(roots)) == KEEP
    assert roots[1:4] == [str(f) for f in reversed(folders[-3:])]
    assert stat.S_IMODE(recent.stat().st_mode) == 0o600
    assert stat.S_IMODE(recent.parent.stat().st_mode) == 0o700
    assert msgspec.json.decode(recent.read_bytes(), type=RecentWorkspaces).roots == roots


def test_roots_that_are_gone_are_dropped_and_a_bad_file_is_replaced(tmp_path: Path) -> None:
    recent = tmp_path / "recent-workspaces.json"
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir()
    gone.mkdir()
    remember(gone, recent)
    remember(kept, recent)
    gone.rmdir()
    here = tmp_path / "here"
    here.mkdir()
    remember(here, recent)
    assert read_roots(recent) == [str(here), str(kept)]
    recent.write_text("{not json")
    assert read_roots(recent) == []
    remember(kept, recent)
    assert read_roots(recent) == [str(kept)]


def test_a_list_that_cannot_be_written_changes_nothing_else(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    remember(tmp_path, blocker / "recent-workspaces.json")  # its folder is a file: logged only
