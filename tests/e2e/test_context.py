"""Context through the real daemon: diagnostics from real language servers after edits, the
repository's instructions, mentions, compaction and the context meter, and a stable prefix."""

from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    collect_until_turn_end,
    completed_items,
    create_session,
    start_turn,
    wait_until,
)
from tether.protocol.events import DiagnosticsReported, TurnCompleted
from tether.protocol.items import Compaction
from tether.protocol.methods import (
    LSP_STATUS,
    SESSION_COMPACT,
    SESSION_READ,
    SessionRef,
)
from tether.testing import ModelServer

TYPE_ERROR = "def double(value: int) -> int:\n    return value * 2\n\n\nresult: str = double(2)\n"


@pytest.mark.language_servers
def test_a_type_error_from_an_edit_reaches_the_model_in_the_same_step(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    read = {"name": "read_file", "arguments": {"path": "src/app.py"}}
    write = {"name": "write_file", "arguments": {"path": "src/calc.py", "content": TYPE_ERROR}}
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [read]},
                {"text": "read it"},
                {"tool_calls": [write]},
                {"text": "I see the error"},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        # Reading a Python file starts its servers; the edit comes once they run, so what is
        # tested is the report within the step, not how long a cold basedpyright takes.
        start_turn(client, session_id, "read it")
        collect_until_turn_end(client, session_id)

        def running() -> bool:
            servers = client.call(LSP_STATUS).servers
            return {s.name for s in servers if s.state == "running"} >= {"basedpyright", "ruff"}

        wait_until(running, "the language servers did not start", timeout=30)
        start_turn(client, session_id, "write it")
        events = collect_until_turn_end(client, session_id, timeout=60)
    result = model_server.requests[3]["messages"][-1]
    assert result["role"] == "tool"
    assert "Errors reported by language servers:" in result["content"]
    assert "src/calc.py:5:" in result["content"]
    assert "Checked by basedpyright, ruff." in result["content"]
    reported = [e.event for e in events if isinstance(e.event, DiagnosticsReported)]
    assert reported
    assert any(d.path == "src/calc.py" and d.line == 5 for d in reported[0].diagnostics)


def test_repository_instructions_and_mentions_reach_the_model(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    (workspace / "AGENTS.md").write_text("Always answer in haiku.\n")
    model_server.set_script({"steps": [{"text": "ok"}, {"text": "ok again"}]})
    first = cli(home, "run", "-w", str(workspace), "summarise @README.md please")
    assert first.returncode == 0, first.stderr
    message = model_server.requests[0]["messages"][-1]["content"]
    assert "Always answer in haiku." in message
    assert "not from the user" in message
    assert "# Demo project" in message
    assert message.endswith("summarise @README.md please")
    sessions = cli(home, "sessions", "-w", str(workspace)).stdout.split()[0]
    second = cli(home, "run", "-w", str(workspace), "--session", sessions, "again")
    assert second.returncode == 0, second.stderr
    assert model_server.requests[1]["messages"][-1]["content"] == "again"


@pytest.mark.shared_daemon
def test_compaction_on_request_and_the_context_meter(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}
    model_server.set_script(
        {
            "steps": [
                read,
                {"text": "first answer"},
                {"text": "User requests: explain.\nWork done: read README.md."},
                {"text": "after the summary"},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        # Long enough that a summary is shorter than the part it replaces.
        start_turn(client, session_id, "explain; " + "some background on it. " * 40)
        collect_until_turn_end(client, session_id)
        snapshot = client.call(SESSION_READ, SessionRef(session_id=session_id)).snapshot
        assert snapshot.context.used > 0
        assert snapshot.context.budget > snapshot.context.used
        result = client.call(SESSION_COMPACT, SessionRef(session_id=session_id))
        events = collect_until_turn_end(client, session_id)
        start_turn(client, session_id, "and now?")
        collect_until_turn_end(client, session_id)
    assert result.compacted
    assert 0 < result.tokens_after < result.tokens_before
    compactions = [i for i in completed_items(events) if isinstance(i, Compaction)]
    assert [c.step for c in compactions] == ["summary"]
    assert "Work done: read README.md." in compactions[0].summary
    assert isinstance(events[-1].event, TurnCompleted)
    summary_request = model_server.requests[2]
    assert "tools" not in summary_request
    after = model_server.requests[3]["messages"]
    assert after[0] == model_server.requests[0]["messages"][0]
    assert "Work done: read README.md." in after[1]["content"]


@pytest.mark.shared_daemon
def test_the_prompt_prefix_is_identical_at_every_step(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    step = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    model_server.set_script({"steps": [step, step, step, {"text": "done"}]})
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "look")
        collect_until_turn_end(client, session_id)
    requests = model_server.requests
    assert len(requests) == 4
    assert all(r["messages"][0] == requests[0]["messages"][0] for r in requests)
    assert all(r["tools"] == requests[0]["tools"] for r in requests)


@pytest.mark.shared_daemon
def test_cli_compact(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                {"text": "an answer"},
                {"text": "another answer"},
                {"text": "User requests: a question."},
            ]
        }
    )
    ran = cli(home, "run", "-w", str(workspace), "a question")
    assert ran.returncode == 0, ran.stderr
    # Too short for a summary to help: nothing changes, and no model call is made.
    compacted = cli(home, "compact", "-w", str(workspace))
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout.startswith("nothing compacted in s_")
    assert "too short" in compacted.stdout
    assert len(model_server.requests) == 1

    ran = cli(home, "run", "-w", str(workspace), "a question; " + "with details. " * 60)
    assert ran.returncode == 0, ran.stderr
    compacted = cli(home, "compact", "-w", str(workspace))
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout.startswith("compacted s_")
    assert "tools" not in model_server.requests[2]
