"""A daemon run for a forwarded port (a container's, an SSH tunnel's): it listens on the
loopback port it is given, with the token from a mounted secret, and refuses to start — one
line, exit 2, nothing served — when the port is taken or the secret is unusable."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import Home, free_port, start_daemon
from tether.clients.core.websocket import HandshakeRejected, WebSocket
from tether.daemon.__main__ import TOKEN_MIN_LENGTH, read_token

TOKEN = "f0" * 32


def _run_daemon(home: Home, workspace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace), *extra],
        env=home.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_daemon_serves_the_fixed_port_with_the_secret_token(tmp_path: Path) -> None:
    home = Home(tmp_path)
    workspace = (tmp_path / "project").resolve()
    workspace.mkdir()
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    port = free_port()
    daemon = start_daemon(home, workspace, "--port", str(port), "--token-file", str(secret))
    try:
        info = home.read_discovery(workspace)
        assert info is not None
        assert (info.port, info.token) == (port, TOKEN)
        with pytest.raises(HandshakeRejected):
            WebSocket.connect("127.0.0.1", port, headers={"Authorization": "Bearer " + "0" * 64})
        ws = WebSocket.connect("127.0.0.1", port, headers={"Authorization": f"Bearer {TOKEN}"})
        ws.close()

        other = (tmp_path / "other").resolve()
        other.mkdir()
        taken = _run_daemon(home, other, "--port", str(port))
        assert taken.returncode == 2, taken.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert "Traceback" not in taken.stderr
        assert home.read_discovery(other) is None
    finally:
        assert daemon.stop() == 0


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (None, "cannot read the token file"),
        ("short\n", f"at least {TOKEN_MIN_LENGTH}"),
        ("a" * 40 + " " + "b" * 40, "one word of printable ASCII"),
        ("é" * 40, "cannot read the token file"),
    ],
)
def test_an_unusable_token_file_is_refused_naming_it(
    tmp_path: Path, content: str | None, fault: str
) -> None:
    secret = tmp_path / "token"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(ValueError, match=fault) as refused:
        read_token(secret)
    assert str(secret) in str(refused.value)


def test_a_refused_token_file_stops_the_start_before_anything_is_served(tmp_path: Path) -> None:
    home = Home(tmp_path)
    workspace = (tmp_path / "project").resolve()
    workspace.mkdir()
    done = _run_daemon(home, workspace, "--token-file", str(tmp_path / "absent"))
    assert done.returncode == 2
    assert done.stderr.startswith("tether daemon: cannot read the token file")
    assert home.read_discovery(workspace) is None
    bad_port = _run_daemon(home, workspace, "--port", "70000")
    assert bad_port.returncode == 2
    assert "expected a port number (0-65535), got 70000" in bad_port.stderr
