"""The token and cookie secret `tether web` keeps for a fixed port
(tether.clients.web.credentials)."""

import json
import stat
from pathlib import Path

import pytest

from tether.clients.web.credentials import credentials_path, kept_credentials


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_the_pair_is_kept_owner_only_per_port_until_renewed() -> None:
    token, secret = kept_credentials(8737)
    assert token != secret
    assert min(len(token), len(secret)) >= 32
    path = credentials_path(8737)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert kept_credentials(8737) == (token, secret)
    assert kept_credentials(9000) != (token, secret)
    renewed = kept_credentials(8737, renew=True)
    assert renewed != (token, secret)
    assert kept_credentials(8737) == renewed


@pytest.mark.parametrize(
    "content",
    ["{not json", "[]", '{"token": "short", "secret": "short"}', '{"token": 1, "secret": 2}'],
)
def test_a_file_that_is_not_a_good_pair_is_replaced(content: str) -> None:
    path = credentials_path(8737)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    path.chmod(0o600)
    token, secret = kept_credentials(8737)
    assert json.loads(path.read_text()) == {"token": token, "secret": secret}


def test_a_file_others_can_read_is_not_trusted() -> None:
    token, secret = kept_credentials(8737)
    credentials_path(8737).chmod(0o644)
    assert kept_credentials(8737) != (token, secret)
    assert stat.S_IMODE(credentials_path(8737).stat().st_mode) == 0o600
