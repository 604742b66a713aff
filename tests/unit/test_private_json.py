"""`write_private_json`: owner-only, atomic, and a failed write leaves the old record."""

import json
import os
import stat
from pathlib import Path

import pytest

from tether.daemon.private_json import write_private_json


def test_the_record_is_owner_only_in_an_owner_only_folder(tmp_path: Path) -> None:
    path = tmp_path / "state" / "workspaces" / "k" / "record.json"
    write_private_json(path, {"trusted": True})
    assert json.loads(path.read_text()) == {"trusted": True}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    write_private_json(path, {"trusted": False})
    assert json.loads(path.read_text()) == {"trusted": False}
    assert os.listdir(path.parent) == ["record.json"]  # no temporary left beside it


def test_a_value_json_cannot_write_leaves_the_old_record_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    write_private_json(path, {"servers": {}})
    with pytest.raises(TypeError):
        write_private_json(path, {"servers": {object()}})
    assert json.loads(path.read_text()) == {"servers": {}}
    assert os.listdir(tmp_path) == ["record.json"]
