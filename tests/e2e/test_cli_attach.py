"""`tether attach` to a session whose last turn did not complete says how it ended and how to go
on, and exits with that turn's code (see clients/cli/exit_codes.py)."""

from pathlib import Path

from tests.e2e.test_cli_approvals import waiting_session
from tests.support import DaemonProcess, Home, cli, command_step, start_daemon
from tether.testing import ModelServer


def go_on(session_id: str) -> str:
    return f"to go on: `tether run -s {session_id} continue`"


def test_attach_after_a_failed_turn_says_so_and_exits_1(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"error": {"status": 404, "message": "no such model"}}]})
    ran = cli(home, "run", "-w", str(workspace), "hello")
    assert ran.returncode == 1, ran.stderr
    session_id = cli(home, "sessions", "-w", str(workspace)).stdout.split()[0]
    attached = cli(home, "attach", "-w", str(workspace), session_id)
    assert attached.returncode == 1, attached.stderr
    assert f"the last turn of session {session_id} failed; {go_on(session_id)}" in attached.stderr


def test_attach_after_a_turn_the_daemon_interrupted_says_so_and_exits_3(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo never")]})
    session_id, _ = waiting_session(daemon)
    daemon.stop()
    again = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        attached = cli(home, "attach", "-w", str(workspace), session_id)
    finally:
        again.stop()
    assert attached.returncode == 3, attached.stderr
    assert (
        f"the last turn of session {session_id} interrupted: the daemon stopped while it ran;"
        f" {go_on(session_id)}"
    ) in attached.stderr


def test_attach_after_a_turn_paused_at_its_step_budget_says_so_and_exits_4(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("max_steps = 1\n")
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    model_server.set_script({"steps": [listing, {"text": "never"}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "explore")
        assert ran.returncode == 4, ran.stderr
        session_id = cli(home, "sessions", "-w", str(workspace)).stdout.split()[0]
        assert f"turn paused (session {session_id}): it reached its step budget" in ran.stderr
        attached = cli(home, "attach", "-w", str(workspace), session_id)
    finally:
        daemon.stop()
    assert attached.returncode == 4, attached.stderr
    assert (
        f"the last turn of session {session_id} paused: it reached its step budget;"
        f" {go_on(session_id)}"
    ) in attached.stderr
