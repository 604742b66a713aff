"""The permission gate and the shell through the real daemon: commands run under bash, which
the gate reads them with, whatever the user's `$SHELL`; a line another shell would read as a
command asks under a rule written for plain words; deny rules match words, not spelling."""

import stat
from pathlib import Path

from tests.support import (
    Home,
    cli,
    command_step,
    start_daemon,
)
from tether.testing import ModelServer


def write_config(home: Home, text: str) -> None:
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)


def fake_user_shell(home: Home, marker: Path) -> None:
    """Make `$SHELL` a shell that leaves `marker` behind and then runs the command in sh."""
    shell = home.root / "fake-shell"
    shell.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec /bin/sh "$@"\n')
    shell.chmod(shell.stat().st_mode | stat.S_IXUSR)
    home.env["SHELL"] = str(shell)


def tool_result(model_server: ModelServer) -> str:
    content = model_server.requests[1]["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


def test_a_line_another_shell_would_run_asks_under_a_rule_for_plain_words(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    write_config(home, '[permissions]\nallow = ["run_command(npm run build *)"]\n')
    model_server.set_script(
        {"steps": [command_step("npm run build =(touch MARKER)"), {"text": "done"}]}
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        result = cli(home, "run", "-w", str(workspace), "build it")
    finally:
        daemon.stop()
    assert result.returncode == 0, result.stderr
    assert "approval needed" in result.stderr
    assert "cannot parse" in result.stderr
    # "always" would allow that very line, and the prompt says so before anyone agrees.
    assert "always would allow: run_command(npm run build =(touch MARKER))" in result.stderr
    assert "no terminal to ask on" in tool_result(model_server)
    assert not (workspace / "MARKER").exists()


def test_a_deny_rule_matches_words_however_the_command_is_spaced(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    write_config(home, '[permissions]\ndeny = ["run_command(git push *)"]\n')
    model_server.set_script(
        {"steps": [command_step("git  push && touch PUSHED"), {"text": "done"}]}
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        result = cli(home, "run", "-w", str(workspace), "--permission-mode", "auto", "push")
    finally:
        daemon.stop()
    assert result.returncode == 0, result.stderr
    assert "denied by the rule `run_command(git push *)`" in tool_result(model_server)
    assert not (workspace / "PUSHED").exists()


def test_commands_run_in_bash_whatever_the_users_shell(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    marker = home.root / "user-shell-ran"
    fake_user_shell(home, marker)
    model_server.set_script(
        {"steps": [command_step('echo "bash=${BASH_VERSION:-none}"'), {"text": "done"}]}
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        result = cli(home, "run", "-w", str(workspace), "--permission-mode", "auto", "go")
    finally:
        daemon.stop()
    assert result.returncode == 0, result.stderr
    assert "bash=none" not in tool_result(model_server)
    assert "bash=" in tool_result(model_server)
    assert not marker.exists()


def test_the_users_own_shell_on_request_asks_for_anything_but_plain_words(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    marker = home.root / "user-shell-ran"
    fake_user_shell(home, marker)
    write_config(home, 'shell = "user"\n[permissions]\nallow = ["run_command(echo *)"]\n')
    model_server.set_script(
        {
            "steps": [
                command_step("echo plain words"),
                command_step("echo *.txt"),
                {"text": "done"},
            ]
        }
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        result = cli(home, "run", "-w", str(workspace), "go")
    finally:
        daemon.stop()
    assert result.returncode == 0, result.stderr
    assert "plain words" in tool_result(model_server)
    assert marker.exists()  # the first command ran in the user's shell, without asking
    assert result.stderr.count("approval needed") == 1
    assert 'shell = "user"' in result.stderr
    denial = model_server.requests[2]["messages"][-1]["content"]
    assert "no terminal to ask on" in denial
