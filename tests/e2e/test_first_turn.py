"""A first turn end to end: CLI -> daemon -> scripted model server -> tools -> events."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inprocess import seqs_covered
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    create_session,
    run_cli,
    start_turn,
)
from tether.protocol.events import ItemCompleted, ItemStarted, TurnCompleted
from tether.protocol.items import AgentMessage, ToolCall
from tether.testing import ModelServer

READ_THEN_ANSWER = {
    "steps": [
        {
            "tool_calls": [
                {"name": "list_dir", "arguments": {"path": "."}},
                {"name": "read_file", "arguments": {"path": "README.md"}},
            ]
        },
        {"text": "The project greets people.", "chunks": 4},
    ]
}


@pytest.mark.shared_daemon
def test_cli_run_writes_the_answer_to_stdout_and_tool_lines_to_stderr(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(READ_THEN_ANSWER)
    result = run_cli(home, "run", "--workspace", str(workspace), "what does it do?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The project greets people.\n"
    # Read-only calls run concurrently and may finish in any order; a call that took 0.05 s
    # or more (a busy machine) also says how long.
    lines = [re.sub(r" (· )?\d+\.\d s$", "", line) for line in result.stderr.splitlines()[:2]]
    assert sorted(lines) == [
        "✓ list_dir(path='.')",
        "✓ read_file(path='README.md')",
    ]
    # The model saw the tool results in the second request, answering each call.
    second = model_server.requests[1]["messages"]
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0_0", "call_0_1"]
    assert "README.md" in tool_messages[0]["content"]
    assert tool_messages[1]["content"] == "1\t# Demo project\n2\tIt greets."


@pytest.mark.shared_daemon
def test_a_run_reads_its_turn_without_typing_extensions_or_inspect(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    """The CLI imports msgspec with typing_extensions hidden (tether.protocol.msgspec_import):
    typing_extensions would bring inspect, ast and dis into every `tether run`."""
    model_server.set_script({"steps": [{"text": "done"}]})
    argv = [sys.executable, "-X", "importtime", "-P", "-m", "tether.clients.cli.main", "run"]
    done = subprocess.run(
        [*argv, "--workspace", str(workspace), "go"],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    imported = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert {"msgspec", "tether.clients.cli.follow"} <= imported
    assert not imported & {"inspect", "ast", "dis", "dataclasses"}


@pytest.mark.shared_daemon
def test_events_are_gap_free_and_items_complete(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(READ_THEN_ANSWER)
    with daemon.client() as client:
        session_id = create_session(client)
        attached = attach(client, session_id)
        turn_id = start_turn(client, session_id, "go")
        events = collect_until_turn_end(client, session_id)
    # Gap-free: a merged delta (had this client fallen behind) covers firstSeq..seq.
    assert seqs_covered(events) == list(range(attached.from_seq + 1, events[-1].seq + 1))
    assert {e.epoch for e in events} == {attached.epoch}
    started = {e.event.item.id for e in events if isinstance(e.event, ItemStarted)}
    completed = [e.event.item for e in events if isinstance(e.event, ItemCompleted)]
    assert started == {item.id for item in completed}
    # Read-only calls run concurrently and may finish in any order.
    calls = sorted((i for i in completed if isinstance(i, ToolCall)), key=lambda c: c.call_id)
    assert [(c.tool, c.status) for c in calls] == [
        ("list_dir", "completed"),
        ("read_file", "completed"),
    ]
    answer = [i for i in completed if isinstance(i, AgentMessage)]
    assert [a.text for a in answer] == ["The project greets people."]
    last = events[-1].event
    assert isinstance(last, TurnCompleted)
    assert (last.turn_id, last.status) == (turn_id, "completed")
    assert last.usage.input_tokens > 0


@pytest.mark.shared_daemon
def test_json_output_is_one_event_per_line(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "hi"}]})
    result = run_cli(home, "run", "--json", "-w", str(workspace), "hello")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["event"]["type"] == "turn_started"
    assert events[-1]["event"] == {
        **events[-1]["event"],
        "type": "turn_completed",
        "status": "completed",
    }
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_model_server_down_fails_with_what_to_fix(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.stop()
    result = run_cli(home, "run", "-w", str(workspace), "hello")
    assert result.returncode == 1
    # Tried twice, told once: no retry lines repeating it before the failure.
    assert result.stderr.count("Could not reach the model server") == 1, result.stderr
    assert "retrying" not in result.stderr
    assert "TETHER_BASE_URL" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
