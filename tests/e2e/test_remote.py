"""`tether --remote user@host:WS ...` against a real sshd on 127.0.0.1 (`tests.remote_support`):
the remote daemon is started there over ssh, its port forwarded here, and the commands behave
as they do locally — a turn, an approval answered from another terminal, detach and attach,
`daemon status|stop` — with nothing of ssh left running afterwards, and a one-line error for
each way of not getting there."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_workspace
from tests.e2e.test_bridge import BridgeProcess, initialize
from tests.e2e.test_cli_approvals import ANSWER_LINE, RunningCli, tool_result
from tests.e2e.test_cli_terminal import QUESTION_END
from tests.e2e.test_interactive import READY, STATUS
from tests.remote_support import Sshd, remote_command
from tests.screen import CTRL_D, ENTER, Terminal
from tests.support import Home, cli, command_step, free_port, run_cli, wait_until
from tests.terminal import TerminalCli
from tether.clients.core import discovery
from tether.testing import ModelServer


class Remote:
    """The remote side (a home, a workspace, the sshd) and a local home whose CLI reaches it."""

    def __init__(self, root: Path, sshd: Sshd, model_server: ModelServer) -> None:
        self.sshd = sshd
        self.home = Home(root / "remote-user", model_server.base_url)
        self.workspace = make_workspace(root / "remote-project")
        self.local = Home(root / "local-user", model_server.base_url)
        self.tmp = root / "local-tmp"
        self.tmp.mkdir()
        self.local.env.update(
            {
                "TETHER_SSH_COMMAND": sshd.ssh_command(),
                "TETHER_REMOTE_COMMAND": remote_command(self.home),
                "TMPDIR": str(self.tmp),
            }
        )
        self.target = f"{sshd.destination}:{self.workspace}"

    def cli(
        self, *args: str, target: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(self.local, "--remote", target or self.target, *args, timeout=timeout)

    def assert_nothing_left(self) -> None:
        """No ssh client of this test runs any more, and its private folders are gone."""
        wait_until(lambda: not self.sshd.ssh_clients(), "the ssh clients to end", timeout=15)
        assert list(self.tmp.iterdir()) == []


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote_model() -> Iterator[ModelServer]:
    with ModelServer({"steps": [{"text": "ok"}]}) as server:
        yield server


@pytest.fixture(scope="module")
def remote(
    tmp_path_factory: pytest.TempPathFactory, sshd: Sshd, remote_model: ModelServer
) -> Iterator[Remote]:
    side = Remote(tmp_path_factory.mktemp("remote"), sshd, remote_model)
    yield side
    run_cli(side.home, "daemon", "stop", "-w", str(side.workspace))


def test_a_turn_runs_on_the_remote_daemon(remote: Remote, remote_model: ModelServer) -> None:
    remote_model.set_script({"steps": [{"text": "hello from over there"}]})
    done = remote.cli("run", "say hello")
    assert done.returncode == 0, done.stderr
    assert "hello from over there" in done.stdout
    # The daemon that ran it is the remote home's, serving the remote workspace.
    info = remote.home.read_discovery(remote.workspace)
    assert info is not None
    assert info.workspace == str(remote.workspace)
    listed = run_cli(remote.home, "sessions", "-w", str(remote.workspace))
    assert "say hello" in listed.stdout
    remote.assert_nothing_left()


def test_an_approval_is_answered_through_the_remote_path(
    remote: Remote, remote_model: ModelServer
) -> None:
    remote_model.set_script({"steps": [command_step("echo approved-remotely"), {"text": "done"}]})
    # RunningCli puts its `command` first: here the global option, then the subcommand.
    run = RunningCli(
        remote.local, remote.target, "run", "--approval-timeout", "60", "go", command="--remote"
    )
    try:
        session_id, approval_id = run.wait_for_line(ANSWER_LINE.pattern).groups()
        listed = remote.cli("approvals")
        assert approval_id in listed.stdout, listed.stderr
        approved = remote.cli("approve", session_id, approval_id)
        assert approved.returncode == 0, approved.stderr
        code, out, err = run.finish(timeout=60)
    finally:
        run.close()
    assert code == 0, err
    assert "done" in out
    assert "approved-remotely" in tool_result(remote_model)
    remote.assert_nothing_left()


def test_detach_then_attach_shows_the_turn_once(remote: Remote, remote_model: ModelServer) -> None:
    remote_model.set_script({"steps": [{"text": "the detached answer"}]})
    started = remote.cli("run", "--detach", "answer later")
    assert started.returncode == 0, started.stderr
    session_id = started.stdout.strip()
    assert re.fullmatch(r"s_\w+", session_id), started.stdout
    attached = remote.cli("attach", session_id)
    assert attached.returncode == 0, attached.stderr
    assert attached.stdout.count("the detached answer") == 1, attached.stdout
    remote.assert_nothing_left()


def test_a_killed_client_leaves_no_ssh_behind(remote: Remote, remote_model: ModelServer) -> None:
    remote_model.set_script({"steps": [command_step("echo never"), {"text": "no"}]})
    run = RunningCli(
        remote.local, remote.target, "run", "--approval-timeout", "60", "go", command="--remote"
    )
    session_id = ""
    try:
        session_id, _ = run.wait_for_line(ANSWER_LINE.pattern).groups()
        assert remote.sshd.ssh_clients()
        os.kill(run.proc.pid, signal.SIGKILL)
        run.proc.wait(timeout=10)
        # The master's stdin was the dead client's: the remote `cat` ends, and the master.
        wait_until(lambda: not remote.sshd.ssh_clients(), "the master to end", timeout=15)
    finally:
        run.close()
        if session_id:
            remote.cli("cancel", session_id)
    for folder in remote.tmp.iterdir():  # SIGKILL gave it no chance to remove its folder
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()


def test_daemon_status_and_stop_act_on_the_remote_daemon(remote: Remote) -> None:
    assert remote.cli("sessions").returncode == 0
    info = remote.home.read_discovery(remote.workspace)
    assert info is not None
    status = remote.cli("daemon", "status")
    assert status.returncode == 0, status.stderr
    assert f"pid {info.pid}" in status.stdout
    assert str(remote.workspace) in status.stdout
    stopped = remote.cli("daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped (pid {info.pid})" in stopped.stdout
    after = remote.cli("daemon", "status")
    assert after.returncode == 1
    assert "no tether daemon is running" in after.stdout
    remote.assert_nothing_left()


def test_chat_on_a_terminal_talks_to_the_remote_daemon(
    remote: Remote, remote_model: ModelServer
) -> None:
    remote_model.set_script({"steps": [{"text": "The remote answer is 42."}]})
    argv = [sys.executable, "-P", "-m", "tether.clients.cli.main", "--remote", remote.target]
    terminal = Terminal(argv, env=remote.local.env)
    try:
        terminal.expect(READY)
        terminal.expect(STATUS)
        terminal.send(f"what is it?{ENTER}")
        terminal.expect("The remote answer is 42.")
        terminal.send(CTRL_D)
        assert terminal.wait() == 0
    finally:
        terminal.close()
    remote.assert_nothing_left()


def test_ctrl_c_in_a_remote_run_cancels_the_turn_there(
    remote: Remote, remote_model: ModelServer
) -> None:
    # The terminal's Ctrl-C reaches the ssh master too (same process group): it must stay up
    # for the CLI to send the cancel through it.
    remote_model.set_script({"steps": [command_step("echo never"), {"text": "never"}]})
    with TerminalCli(remote.local, "--remote", remote.target, "run", "go") as cli:
        cli.expect(QUESTION_END)
        cli.send("\x03")
        cli.expect("cancelling (Ctrl-C again to leave it)")
        shown = cli.expect("continue`")
        assert "turn cancelled (session" in shown
        assert cli.wait() == 3
    remote.assert_nothing_left()


def test_a_bridge_reconnects_to_a_restarted_remote_daemon(remote: Remote) -> None:
    bridge = BridgeProcess(
        remote.local, remote.workspace, argv=["--remote", remote.target, "bridge"]
    )
    try:
        initialize(bridge)
        before = bridge.call("daemon/status")["pid"]
        stopped = run_cli(remote.home, "daemon", "stop", "-w", str(remote.workspace))
        assert stopped.returncode == 0, stopped.stderr
        bridge.wait_for(lambda m: m.get("method") == "bridge/disconnected")
        # The daemon is gone there: reconnecting starts another, on another port, and
        # forwards that one.
        reconnected = bridge.call("bridge/reconnect")
        assert reconnected["started"] is True
        assert reconnected["pid"] != before
        initialize(bridge)
        assert bridge.call("daemon/status")["pid"] == reconnected["pid"]
        assert bridge.close() == (0, b"")
    finally:
        bridge.kill()
    remote.assert_nothing_left()


def test_the_remote_is_forgotten_when_the_command_ends(remote: Remote) -> None:
    # In one process (as an embedding would run commands), the path names a local workspace
    # again afterwards.
    done = cli(remote.local, "--remote", remote.target, "sessions")
    assert done.returncode == 0, done.stderr
    assert discovery.remote_locator(remote.workspace) is None
    remote.assert_nothing_left()


def test_daemon_ensure_prints_the_discovery_record(home: Home, workspace: Path) -> None:
    def ensure(*args: str) -> dict[str, Any]:
        done = cli(home, "daemon", "ensure", "-w", str(workspace), *args)
        assert done.returncode == 0, done.stderr
        [line] = done.stdout.splitlines()
        answer: dict[str, Any] = json.loads(line)
        assert answer["discoveryFile"] == str(home.discovery_path(workspace))
        return answer

    assert ensure("--no-start") == {
        "discovery": None,
        "started": False,
        "discoveryFile": str(home.discovery_path(workspace)),
    }
    first = ensure()
    try:
        info = home.read_discovery(workspace)
        assert info is not None
        assert first["started"] is True
        assert first["discovery"]["token"] == info.token
        assert first["discovery"]["port"] == info.port
        assert ensure("--no-start") == {**first, "started": False}
        refused = cli(home, "daemon", "status", "--no-start", "-w", str(workspace))
        assert refused.returncode == 2
        assert "--no-start goes with `tether daemon ensure`" in refused.stderr
    finally:
        cli(home, "daemon", "stop", "-w", str(workspace))


# --- what goes wrong ---------------------------------------------------------------------------


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of stderr of a command that failed to reach the remote (exit code 2)."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tether: ")
    return lines[0]


def test_an_unreachable_host_is_one_line(remote: Remote) -> None:
    closed = free_port()
    remote.local.env["TETHER_SSH_COMMAND"] = f"{remote.sshd.ssh_command()} -p {closed}"
    try:
        line = _one_line_error(remote.cli("sessions"))
    finally:
        remote.local.env["TETHER_SSH_COMMAND"] = remote.sshd.ssh_command()
    assert f"cannot reach {remote.sshd.destination} over ssh" in line
    assert "Connection refused" in line
    remote.assert_nothing_left()


def test_a_refused_key_is_one_line(remote: Remote) -> None:
    stranger = remote.sshd.client_config("stranger_config", remote.sshd.root / "stranger_key")
    remote.local.env["TETHER_SSH_COMMAND"] = remote.sshd.ssh_command(stranger)
    try:
        line = _one_line_error(remote.cli("run", "hi"))
    finally:
        remote.local.env["TETHER_SSH_COMMAND"] = remote.sshd.ssh_command()
    assert "Permission denied" in line
    remote.assert_nothing_left()


def test_tether_missing_on_the_remote_is_one_line(remote: Remote) -> None:
    missing = shlex.quote(str(remote.home.root / "no" / "tether"))
    line = _one_line_error(remote.cli("--remote-command", missing, "sessions"))
    assert "is not found on" in line
    assert "--remote-command" in line
    remote.assert_nothing_left()


def test_a_missing_remote_workspace_is_one_line(remote: Remote) -> None:
    absent = remote.workspace.parent / "absent"
    line = _one_line_error(remote.cli("sessions", target=f"{remote.sshd.destination}:{absent}"))
    assert f"{absent} is not a directory" in line
    line = _one_line_error(
        remote.cli("daemon", "status", target=f"{remote.sshd.destination}:{absent}")
    )
    assert f"{absent} is not a directory" in line
    remote.assert_nothing_left()
