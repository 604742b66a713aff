"""The environment a turn's commands run in: the shell's that sent the turn, not the one that
happened to start the daemon; the daemon's for a client that sends none; never a secret."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    command_step,
    completed_items,
    create_session,
    tool_calls,
)
from tether.protocol.events import TurnStarted
from tether.protocol.methods import DAEMON_STATUS, TURN_START, TurnStartParams
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon


def fake_python(folder: Path, marker: str) -> Path:
    """A folder whose `python3` prints `marker` (as a venv's would be another interpreter)."""
    folder.mkdir()
    program = folder / "python3"
    program.write_text(f"#!/bin/sh\necho {marker}\n")
    program.chmod(0o755)
    return folder


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`tether *args` run from a shell whose environment is `env`."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tool_output(model_server: ModelServer) -> str:
    """What the model was told the command printed (the last message of its second request)."""
    model_server.wait_for_requests(2)
    content = model_server.requests[1]["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


def test_a_turn_runs_its_commands_with_the_python_of_the_shell_that_sent_it(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    venv = fake_python(tmp_path / "venv-bin", "python-of-the-activated-venv")
    model_server.set_script({"steps": [command_step("python3"), {"text": "done"}]})
    shell = {
        **home.env,
        "PATH": f"{venv}:{home.env['PATH']}",
        "VIRTUAL_ENV": str(tmp_path),
    }
    done = tether(shell, "run", "-v", "--permission-mode", "auto", "-w", str(workspace), "which?")
    assert done.returncode == 0, done.stderr
    assert re.search(
        rf"^tether: turn t_\w+ runs its commands in its client's environment"
        rf" \(VIRTUAL_ENV={tmp_path}, PATH starts {venv}\)$",
        done.stderr,
        re.MULTILINE,
    ), done.stderr
    assert "python-of-the-activated-venv" in tool_output(model_server)
    with daemon.client() as client:
        status = client.call(DAEMON_STATUS)
    environment = status.last_turn_environment
    assert environment is not None
    assert (environment.source, environment.virtual_env) == ("client", str(tmp_path))
    assert environment.path.startswith(f"{venv}:")
    shown = tether(home.env, "daemon", "status", "-w", str(workspace)).stdout
    assert (
        f"last turn ran its commands in its client's environment (VIRTUAL_ENV={tmp_path},"
        f" PATH starts {venv})"
    ) in shown


def test_secrets_a_client_sends_are_dropped_and_a_client_that_sends_none_gets_the_daemons(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    command = 'echo "[$LEAK_TOKEN][$SHELL_MARK][$(command -v python3)]"'
    model_server.set_script(
        {"steps": [command_step(command), {"text": "a"}, command_step(command), {"text": "b"}]}
    )
    venv = fake_python(tmp_path / "bin", "unused")
    sent = {"PATH": f"{venv}:/usr/bin:/bin", "SHELL_MARK": "sent", "LEAK_TOKEN": "s3kr1t-value"}
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        params = TurnStartParams(
            session_id=session_id, text="env", env=sent, permission_mode="auto"
        )
        client.call(TURN_START, params)
        events = collect_until_turn_end(client, session_id)
        params = TurnStartParams(session_id=session_id, text="again")  # as an editor sends it
        client.call(TURN_START, params)
        events += collect_until_turn_end(client, session_id)
    first, second = (call.output for call in tool_calls(events))
    assert f"[][sent][{venv}/python3]" in first
    assert "[][][" in second
    assert str(venv) not in second
    started = [p.event for p in events if isinstance(p.event, TurnStarted)]
    assert [s.environment.source for s in started if s.environment] == ["client", "daemon"]
    assert "s3kr1t-value" not in home.log_path(workspace).read_text()
    assert not [item for item in completed_items(events) if "s3kr1t" in str(item)]


def test_the_turns_hooks_run_in_the_environment_its_client_sent(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    seen = tmp_path / "hook-saw"
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[[hooks]]\nevent = "turn_end"\ncommand = "echo \\"[$HOOK_MARK]\\" > {seen}"\n'
    )
    model_server.set_script({"steps": [{"text": "ok"}]})
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            env = {"PATH": "/usr/bin:/bin", "HOOK_MARK": "from-the-client"}
            client.call(TURN_START, TurnStartParams(session_id=session_id, text="hi", env=env))
            collect_until_turn_end(client, session_id)
    finally:
        config.unlink()
    assert seen.read_text() == "[from-the-client]\n"
