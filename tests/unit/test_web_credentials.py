"""tether web's sign-in kept per port across restarts (`tether.clients.web.credentials`)."""

import stat
from pathlib import Path

from tether.clients.web.credentials import Credentials, keep, recall


def test_credentials_kept_for_a_port_come_back_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state" / "web-8737.json"
    assert recall(8737, path) is None
    keep(8737, Credentials(token="t", secret="s"), path)
    assert recall(8737, path) == Credentials(token="t", secret="s")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_port_zero_and_a_file_that_is_not_credentials_mean_fresh_ones(tmp_path: Path) -> None:
    path = tmp_path / "web.json"
    keep(0, Credentials(token="t", secret="s"), path)
    assert recall(0, path) is None, "port 0 is any free port: nothing to reuse"
    for text in ("{", '{"token": "t"}', '{"token": "", "secret": "s"}', "[]"):
        path.write_text(text)
        assert recall(8737, path) is None, text
