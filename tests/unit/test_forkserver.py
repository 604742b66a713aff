"""The fork server the tests' daemons come from (tests/forkserver.py): a child gets what
`python -m tether.daemon` would, and its exit reads as `subprocess` reads one."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import Home, fork_server, start_daemon
from tether.protocol.methods import DAEMON_STATUS, Empty


def test_a_forked_daemon_refuses_bad_arguments_as_the_real_one_does(tmp_path: Path) -> None:
    home = Home(tmp_path / "home", "http://127.0.0.1:9")
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        child = fork_server().spawn(["--no-such-flag"], home.env, tmp_path, out)
    assert child.wait(timeout=30) == 2
    assert child.poll() == 2
    real = subprocess.run(
        [sys.executable, "-m", "tether.daemon", "--no-such-flag"],
        env=home.env,
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert real.returncode == 2
    assert log.read_bytes() == real.stderr


def test_a_forked_daemon_has_the_tests_environment_folder_and_no_stray_descriptors(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home", "http://127.0.0.1:9")
    workspace = tmp_path / "project"
    workspace.mkdir()
    home.env["TETHER_MODEL"] = "probe-model"
    daemon = start_daemon(home, workspace, cwd=workspace)
    try:
        pid = daemon.proc.pid
        # /proc/PID/environ keeps the fork server's first environment; the daemon's own
        # settings show which one it reads.
        with daemon.client() as client:
            status = client.call(DAEMON_STATUS, Empty())
        assert (status.model, status.base_url) == ("probe-model", "http://127.0.0.1:9")
        assert Path(f"/proc/{pid}/cwd").resolve() == workspace.resolve()
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
        # What the daemon opened itself (its log, database, sockets) is there; nothing of the
        # fork server's (its control socket, the pidfds of other children) is.
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert not [link for link in links if "pidfd" in link]
    finally:
        assert daemon.stop() == 0


def test_a_killed_child_reads_as_a_negative_signal_and_wait_can_time_out(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home", "http://127.0.0.1:9")
    workspace = tmp_path / "project"
    workspace.mkdir()
    daemon = start_daemon(home, workspace)
    with pytest.raises(subprocess.TimeoutExpired):
        daemon.proc.wait(timeout=0.05)
    daemon.proc.send_signal(signal.SIGKILL)
    assert daemon.proc.wait(timeout=30) == -signal.SIGKILL
    daemon.proc.send_signal(signal.SIGTERM)  # gone: nothing is sent, as with Popen
