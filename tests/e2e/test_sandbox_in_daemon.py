"""The command sandbox in the real daemon subprocess: what only a process proves. At its start
the daemon tries the sandbox once and logs why commands cannot run; a sandboxed background
process, started without asking in mode `edits`, dies with a daemon killed by SIGKILL (pid 1 of
its namespace goes with bwrap, and everything in it with pid 1)."""

import uuid
from pathlib import Path

from tests.support import (
    Home,
    attach,
    cli,
    create_session,
    read_events,
    require_program,
    start_daemon,
    tagged,
    wait_until,
)
from tether.protocol.events import ItemCompleted
from tether.protocol.items import ToolCall
from tether.protocol.methods import TURN_START, TurnStartParams
from tether.testing import ModelServer

WHY = "the command sandbox runs commands under bubblewrap"


def write_config(home: Home, text: str) -> None:
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)


def test_the_daemon_says_at_its_start_that_sandboxed_commands_cannot_run(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-bwrap"
    write_config(home, f'sandbox = "bwrap"\nsandbox_bwrap = "{missing}"\n')
    daemon = start_daemon(home, workspace)
    try:
        log = home.log_path(workspace)
        wait_until(
            lambda: log.exists() and "is not installed, so commands do not run" in log.read_text(),
            "no sandbox warning in the daemon's log",
        )
        status = cli(home, "daemon", "status", "-w", str(workspace))
        assert "  sandbox   bwrap, no network" in status.stdout
        assert "commands do not run: the command sandbox is on" in status.stdout
        assert f"bubblewrap ({missing}) is not installed" in status.stdout
    finally:
        daemon.kill()


def test_a_sandboxed_background_process_dies_with_a_killed_daemon(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    bwrap = require_program("bwrap", WHY)
    write_config(home, f'sandbox = "bwrap"\nsandbox_bwrap = "{bwrap}"\n')
    marker = uuid.uuid4().hex
    home.env["MARK"] = marker
    call = {
        "name": "run_command",
        "arguments": {
            "command": "sleep 300 & setsid sleep 300 & wait",
            "description": "a server",
            "background": True,
        },
    }
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "started"}]})
    daemon = start_daemon(home, workspace)
    try:
        with daemon.client("a") as client:
            session_id = create_session(client)
            attach(client, session_id)
            # The default mode (edits): a sandboxed command does not ask.
            client.call(TURN_START, TurnStartParams(session_id=session_id, text="serve"))
            read_events(
                client,
                session_id,
                lambda evs: any(
                    isinstance(e.event, ItemCompleted)
                    and isinstance(e.event.item, ToolCall)
                    and e.event.item.status == "completed"
                    for e in evs
                ),
            )
        # bwrap, pid 1, the shell and two sleeps, one of them in a session of its own (the
        # daemon carries the variable too).
        tree = lambda: [pid for pid in tagged(marker) if pid != daemon.proc.pid]  # noqa: E731
        wait_until(lambda: len(tree()) == 5, "the sandboxed tree did not start")
    finally:
        daemon.kill()
    wait_until(lambda: tagged(marker) == [], "the sandboxed tree outlived the daemon")
