"""The turn loop's rules through the real daemon: steering, retries, failures that say what
to fix, the step budget and `continue`."""

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
    deltas_at_least,
    read_events,
    start_daemon,
    start_turn,
)
from tether.protocol.events import (
    InputQueued,
    ModelRetry,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, Notice, TurnSummary, UserMessage
from tether.protocol.methods import TURN_START, TurnStartParams
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

HELD_TEXT = {"text": "x" * 100, "chunks": 50, "hold_at_chunks": [5]}
"""Waits after five deltas for `model_server.release()`: a message sent then is mid-turn."""


def test_message_sent_mid_turn_is_queued_for_everyone_and_joins_the_turn(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [HELD_TEXT, {"text": "about the follow-up"}]})
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attach(a, session_id)
        attach(b, session_id)
        turn_id = start_turn(a, session_id, "first")
        early = read_events(b, session_id, deltas_at_least(5))
        queued = b.call(
            TURN_START,
            TurnStartParams(session_id=session_id, text="also check the tests"),
        )
        assert (queued.turn_id, queued.queued) == (turn_id, True)
        model_server.release()
        events_a = collect_until_turn_end(a, session_id)
        events_b = early + collect_until_turn_end(b, session_id)
    for events in (events_a, events_b):
        announced = [e.event for e in events if isinstance(e.event, InputQueued)]
        assert [(q.input_id, q.text, q.by) for q in announced] == [
            (queued.input_id, "also check the tests", "b")
        ]
    users = [i for i in completed_items(events_a) if isinstance(i, UserMessage)]
    assert [u.text for u in users] == ["first", "also check the tests"]
    assert users[1].id == queued.input_id
    assert len(model_server.requests) == 2
    assert model_server.requests[1]["messages"][-1] == {
        "role": "user",
        "content": "also check the tests",
    }
    last = events_a[-1].event
    assert isinstance(last, TurnCompleted)
    assert (last.turn_id, last.status) == (turn_id, "completed")


def test_a_retry_reaches_the_client_as_a_model_retry_event(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    # Retry-After: 0 keeps the wait out of the test; backoff, Retry-After waits and dropped
    # streams are covered in virtual time by tests/unit/test_loop_retries.py.
    model_server.set_script(
        {"steps": [{"error": {"status": 429, "retry_after": "0"}}, {"text": "made it"}]}
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "go")
        events = collect_until_turn_end(client, session_id)
    retries = [e.event for e in events if isinstance(e.event, ModelRetry)]
    assert [(r.attempt, r.max_attempts, r.delay_seconds) for r in retries] == [(1, 3, 0.0)]
    assert "rate-limiting requests (HTTP 429" in retries[0].reason
    texts = [i.text for i in completed_items(events) if isinstance(i, AgentMessage)]
    assert texts == ["made it"]
    assert len(model_server.requests) == 2


def test_auth_failure_is_not_retried_and_says_what_to_fix(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"error": {"status": 401, "message": "invalid key"}}]})
    result = cli(home, "run", "-w", str(workspace), "hello")
    assert result.returncode == 1
    assert "TETHER_API_KEY" in result.stderr
    assert "invalid key" in result.stderr
    assert len(model_server.requests) == 1


def test_a_failed_turn_prints_its_reason_once(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"error": {"status": 404, "message": "no such model"}}]})
    result = cli(home, "run", "-w", str(workspace), "hello")
    assert result.returncode == 1
    reasons = [line for line in result.stderr.splitlines() if "no such model" in line]
    assert len(reasons) == 1, result.stderr
    assert reasons[0].startswith("tether: error: ")
    assert "tether: turn failed" in result.stderr


def test_step_budget_pauses_and_continue_resumes(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("max_steps = 3\n")
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    model_server.set_script({"steps": [listing, listing, listing, listing, {"text": "finished"}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        paused = cli(home, "run", "-w", str(workspace), "--json", "explore")
        assert paused.returncode == 4, paused.stderr
        assert len(model_server.requests) == 3
        assert '"stopReason":"paused"' in paused.stdout
        sessions = cli(home, "sessions", "-w", str(workspace))
        session_id = sessions.stdout.split()[0]
        resumed = cli(home, "run", "-w", str(workspace), "--session", session_id, "continue")
        assert resumed.returncode == 0, resumed.stderr
        assert "finished" in resumed.stdout
        last = model_server.requests[-1]["messages"]
        assert {"role": "user", "content": "continue"} in last
    finally:
        daemon.stop()


def test_every_turn_ends_with_a_summary(daemon: DaemonProcess, model_server: ModelServer) -> None:
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
                {"text": "done", "usage": {"prompt_tokens": 120, "completion_tokens": 7}},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "go")
        events = collect_until_turn_end(client, session_id)
    items = completed_items(events)
    summary = items[-1]
    assert isinstance(summary, TurnSummary)
    assert summary.stop_reason == "completed"
    assert summary.model_calls == 2
    assert summary.output_tokens >= 7
    assert summary.input_tokens >= 120
    assert summary.duration_seconds > 0
    assert not any(isinstance(i, Notice) and i.level == "error" for i in items)


def test_bad_tool_calls_are_answered_and_the_turn_goes_on(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {"name": "format_disk", "arguments": {}},
                        {"name": "read_file", "arguments_raw": '{"path": "README.md"'},
                        {"name": "read_file", "arguments": {"offset": 2}},
                        {"name": "read_file", "arguments": {"path": "README.md", "limit": "ten"}},
                    ]
                },
                {"text": "recovered"},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "go")
        events = collect_until_turn_end(client, session_id)
    results = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert "Unknown tool 'format_disk'" in results[0]
    assert "read_file, list_dir, glob, grep" in results[0]
    assert '{"path": "README.md"' in results[1]
    assert "not valid JSON" in results[1]
    assert "missing required field `path`" in results[2]
    assert "$.limit" in results[3]
    assert isinstance(events[-1].event, TurnCompleted)
    assert events[-1].event.status == "completed"


def test_cut_off_reply_is_continued_twice_at_most(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    cut = {"text": "and so", "finish_reason": "length"}
    model_server.set_script({"steps": [cut, cut, cut, {"text": "not reached"}]})
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "write a lot")
        events = collect_until_turn_end(client, session_id)
    assert len(model_server.requests) == 3
    notices = [i for i in completed_items(events) if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["output_limit", "output_limit"]
    assert isinstance(events[-1].event, TurnCompleted)
    assert events[-1].event.status == "completed"


def test_third_identical_call_gets_a_note(daemon: DaemonProcess, model_server: ModelServer) -> None:
    same = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}
    model_server.set_script({"steps": [same, same, same, {"text": "ok"}]})
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "loop")
        collect_until_turn_end(client, session_id)
    last_results = [
        [m["content"] for m in request["messages"] if m["role"] == "tool"][-1]
        for request in model_server.requests[1:]
    ]
    assert ["change approach" in r for r in last_results] == [False, False, True]
