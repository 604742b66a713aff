"""The fork server the tests' daemons come from (tests/forkserver.py): a child gets what
`python -m tether.daemon` would, and its exit reads as `subprocess` reads one."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, fork_server, start_daemon
from tether.protocol.methods import DAEMON_STATUS, Empty


def test_a_forked_daemon_refuses_bad_arguments_as_the_real_one_does(tmp_path: Path) -> None:
    home = Home(tmp_path / "home", "http://127.0.0.1:9")
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        child = fork_server().spawn(["--no-such-flag"], home.env, tmp_path, out)
    assert child.wait(timeout=30) == 2
    assert child.poll() == 2
    real = subprocess.run(
        [sys.executable, "-P", "-m", "tether.daemon", "--no-such-flag"],
        env=home.env,
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert real.returncode == 2
    assert log.read_bytes() == real.stderr


def _fd_links(pid: int) -> list[str]:
    return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]


def _pidfd_targets(pid: int) -> list[int]:
    """The processes the pidfds `pid` holds refer to."""
    targets: list[int] = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if "pidfd" in os.readlink(f"/proc/{pid}/fd/{fd}"):
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            lines = info.splitlines()
            targets += [int(line.split()[1]) for line in lines if line.startswith("Pid:")]
    return targets


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _started(tmp_path: Path, **env: str) -> tuple[DaemonProcess, Path]:
    home = Home(tmp_path / "home", "http://127.0.0.1:9")
    home.env.update(env)
    workspace = tmp_path / "project"
    workspace.mkdir()
    return start_daemon(home, workspace, cwd=workspace), workspace


def test_a_forked_daemon_has_the_tests_environment_folder_and_no_stray_descriptors(
    tmp_path: Path,
) -> None:
    daemon, workspace = _started(tmp_path, TETHER_MODEL="probe-model")
    try:
        pid = daemon.proc.pid
        # /proc/PID/environ keeps the fork server's first environment; the daemon's own
        # settings show which one it reads.
        with daemon.client() as client:
            status = client.call(DAEMON_STATUS, Empty())
        assert (status.model, status.base_url) == ("probe-model", "http://127.0.0.1:9")
        assert Path(f"/proc/{pid}/cwd").resolve() == workspace.resolve()
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
        # Nothing of the fork server's (its control socket, the pidfds of its children) is
        # among what the daemon holds.
        server = fork_server().pid
        held = set(_fd_links(pid))
        theirs = [link for link in _fd_links(server)[3:] if "pidfd" not in link]
        assert [link for link in theirs if link in held] == []
        # The only pidfds are for its own children (its watchdog).
        assert [_parent(target) for target in _pidfd_targets(pid)] in ([], [pid])
    finally:
        assert daemon.stop() == 0


def test_a_killed_child_reads_as_a_negative_signal_and_wait_can_time_out(
    tmp_path: Path,
) -> None:
    daemon, _ = _started(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        daemon.proc.wait(timeout=0.05)
    daemon.proc.send_signal(signal.SIGKILL)
    assert daemon.proc.wait(timeout=30) == -signal.SIGKILL
    daemon.proc.send_signal(signal.SIGTERM)  # gone: nothing is sent, as with Popen
