"""`tether run` in a new session against a running daemon: the turn is started before the
client's heavy imports, and the client that attaches afterwards still gets the turn's every
event once, from its first (they are replayed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, command_step, run_cli
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

_FIRST_IMPORT_OF_MSGSPEC = """
import sys

seen = []

def hook(event, args):
    if event == "import" and args[0] == "msgspec" and not seen:
        frame = sys._getframe(1)
        while frame is not None:
            seen.append(frame.f_code.co_name)
            frame = frame.f_back

sys.addaudithook(hook)
from tether.clients.cli.main import main

code = main(["run", "--workspace", sys.argv[1], "go"])
print(",".join(seen), file=sys.stderr)
sys.exit(code)
"""


def test_the_turn_is_started_before_msgspec_is_imported(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "started early"}]})
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_IMPORT_OF_MSGSPEC, str(workspace)],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "started early"
    stack = done.stderr.strip().splitlines()[-1].split(",")
    # msgspec first comes with the typed client the prelude hands over to once the turn was
    # sent, not with the early look for a daemon nor with the ordinary connection.
    assert "handover" in stack, stack
    assert "cmd_run" in stack, stack
    assert "_start_daemon_early" not in stack, stack
    assert "connect" not in stack, stack


def test_the_client_gets_every_event_of_the_turn_once_from_its_first(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo early"), {"text": "after the command"}]})
    result = run_cli(home, "run", "--json", "-w", str(workspace), "go")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["event"]["type"] for e in events]
    assert kinds[0] == "turn_started", kinds
    assert kinds.count("turn_started") == 1, kinds
    assert kinds.count("turn_completed") == 1, kinds
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "lost or doubled"
    done = [e["event"]["item"] for e in events if e["event"]["type"] == "item_completed"]
    calls = [item for item in done if item["type"] == "tool_call"]
    assert len(calls) == 1, calls
    assert "early" in json.dumps(calls[0])
    assert "after the command" in result.stdout


def test_a_mention_that_cannot_be_attached_is_reported_and_the_turn_runs(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "ran anyway"}]})
    long = "x" * 5000
    result = run_cli(home, "run", "-w", str(workspace), f"look at @{long}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ran anyway"
    assert f"tether: {long}: File name too long; not attached" in result.stderr
