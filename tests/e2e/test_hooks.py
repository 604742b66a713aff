"""Hooks through the real daemon and CLI: a pre_tool hook of the user's config refuses a
command, `tether run` shows the notice, and `tether hooks` lists what is configured (and that
the workspace's hooks are not run); the user's notify command hears of an approval nobody is
attached to see (and a workspace's is never run)."""

import json
import stat
from pathlib import Path

from tests.support import Home, command_step, run_cli, start_daemon, wait_until
from tether.testing import ModelServer


def test_a_denying_hook_shows_in_tether_run_and_tether_hooks_lists_it(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    guard = home.root / "guard.sh"
    guard.write_text("#!/bin/sh\necho 'touching is reviewed first'\nexit 2\n")
    guard.chmod(guard.stat().st_mode | stat.S_IXUSR)
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[[hooks]]\nevent = "pre_tool"\nname = "guard"\ncommand = "{guard}"\n'
        'match = ["run_command(touch *)"]\ntimeout = 5\n'
    )
    (workspace / ".tether").mkdir(exist_ok=True)
    (workspace / ".tether/config.toml").write_text(
        '[[hooks]]\nevent = "turn_end"\ncommand = "touch ../workspace-hook-ran"\n'
    )
    model_server.set_script({"steps": [command_step("touch ran.txt"), {"text": "fine"}]})
    daemon = start_daemon(home, workspace)
    try:
        ran = run_cli(home, "run", "-w", str(workspace), "--permission-mode", "auto", "go")
        shown = run_cli(home, "hooks", "-w", str(workspace))
        listed = json.loads(run_cli(home, "hooks", "-w", str(workspace), "--json").stdout)
    finally:
        daemon.stop()
    assert ran.returncode == 0, ran.stderr
    assert not (workspace / "ran.txt").exists()
    assert not (workspace.parent / "workspace-hook-ran").exists()
    assert (
        "warning: The pre_tool hook `guard` denied run_command(touch ran.txt): "
        "touching is reviewed first"
    ) in ran.stderr
    assert shown.stdout.splitlines() == [
        f"pre_tool      guard: {guard}  match run_command(touch *)  (timeout 5 s)",
        "the workspace's .tether/config.toml sets hooks: not run (only your own config may)",
    ]
    (hook,) = listed["hooks"]
    assert hook == {
        "event": "pre_tool",
        "command": str(guard),
        "name": "guard",
        "match": ["run_command(touch *)"],
        "timeoutSeconds": 5.0,
    }
    assert listed["configFile"] == str(config)
    assert listed["workspaceIgnored"] is True


def test_an_approval_nobody_is_attached_to_runs_the_users_notify_command(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    events = home.root / "events.jsonl"
    notify = home.root / "notify.sh"
    notify.write_text(f'#!/bin/sh\ncat >> "{events}"\necho >> "{events}"\n')
    notify.chmod(notify.stat().st_mode | stat.S_IXUSR)
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'notify = ["{notify}"]\nnotify_after = 0\n')
    (workspace / ".tether").mkdir(exist_ok=True)
    (workspace / ".tether/config.toml").write_text(
        'notify = ["touch", "../workspace-notify-ran"]\nnotify_after = 0\n'
    )
    model_server.set_script({"steps": [command_step("echo hi"), {"text": "fine"}]})
    daemon = start_daemon(home, workspace)
    try:
        detached = run_cli(home, "run", "-w", str(workspace), "--detach", "go")
        assert detached.returncode == 0, detached.stderr
        wait_until(lambda: events.exists() and events.read_text().count("\n") >= 1, "notified")
        [event] = [json.loads(line) for line in events.read_text().splitlines()]
    finally:
        daemon.stop()
    assert event["event"] == "approval_requested"
    assert event["session_id"] == detached.stdout.strip()
    assert event["approval"]["command"] == "echo hi"
    assert not (workspace.parent / "workspace-notify-ran").exists()
