"""Cancelling turns, losing clients and losing the daemon, against the real daemon subprocess.

Turns are held mid-stream by the scripted model server (`hold_at_chunks`) so that the cancel,
the disconnect or the signal lands while the model is still streaming.
"""

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
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
    numbered,
    persisted_events,
    read_events,
    read_snapshot,
    start_daemon,
    start_turn,
    tool_calls_answered,
    wait_until,
)
from tether.protocol.events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.methods import (
    SESSION_LIST,
    TURN_CANCEL,
    SessionEventParams,
    TurnCancelParams,
)
from tether.protocol.session import SessionSnapshot, TurnSnapshot
from tether.testing import ModelServer

_encode = msgspec.json.Encoder().encode


SLOW_ANSWER = numbered(200)
HELD_STEP = {"text": SLOW_ANSWER, "chunks": 200, "hold_at_chunks": [10]}
"""Streams ten deltas, then waits (for a `model_server.release()` these tests never give): the
cancel, the kill or the SIGTERM comes mid-stream, however busy the machine."""
"""About 4 s of streaming: long enough to act on a turn in the middle of it."""

READ_TOOLS = {
    "tool_calls": [
        {"name": "read_file", "arguments": {"path": "README.md"}},
        {"name": "read_file", "arguments": {"path": "src/app.py"}},
    ]
}


def assert_every_started_item_completed(events: list[SessionEventParams]) -> None:
    started = [e.event.item.id for e in events if isinstance(e.event, ItemStarted)]
    completed = [e.event.item.id for e in events if isinstance(e.event, ItemCompleted)]
    assert started
    assert sorted(started) == sorted(completed)
    assert len(set(completed)) == len(completed)


def the_turn(snapshot: SessionSnapshot, turn_id: str) -> TurnSnapshot:
    turns = [t for t in snapshot.turns if t.id == turn_id]
    assert len(turns) == 1, snapshot.turns
    return turns[0]


def running_turn_column(home: Home, workspace: Path, session_id: str) -> str | None:
    with closing(sqlite3.connect(home.database_path(workspace))) as db:
        row = db.execute("SELECT running_turn FROM sessions WHERE id = ?", (session_id,)).fetchone()
    assert row is not None
    return row[0]


# --- 1. cancel --------------------------------------------------------------------------------


@pytest.mark.shared_daemon
@pytest.mark.parametrize("via", ["rpc", "cli"])
def test_cancel_mid_stream_ends_the_turn_cancelled_for_every_client(
    via: str,
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
) -> None:
    model_server.set_script({"steps": [HELD_STEP, {"text": "the next turn's answer"}]})
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attach(a, session_id)
        attach(b, session_id, role="observer")
        turn_id = start_turn(a, session_id, "write a lot")
        head = read_events(a, session_id, deltas_at_least(10))

        if via == "rpc":
            cancelled = a.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
            assert cancelled.turn_id == turn_id
        else:
            result = cli(home, "cancel", "-w", str(workspace))
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == f"cancelled turn {turn_id} of session {session_id}"
        events_a = head + collect_until_turn_end(a, session_id, timeout=5)
        events_b = collect_until_turn_end(b, session_id, timeout=5)

    for events in (events_a, events_b):
        last = events[-1].event
        assert isinstance(last, TurnCompleted)
        assert (last.turn_id, last.status) == (turn_id, "cancelled")
        assert_every_started_item_completed(events)
    assert [(e.seq, _encode(e.event)) for e in events_b] == [
        (e.seq, _encode(e.event)) for e in events_a
    ]
    # The partial answer is closed with exactly the text streamed before the cancel: the turn
    # ended while the model was still streaming, not after.
    answers = [i for i in completed_items(events_a) if isinstance(i, AgentMessage)]
    assert len(answers) == 1
    streamed = "".join(e.event.delta for e in events_a if isinstance(e.event, ItemDelta))
    assert answers[0].text == streamed
    assert 10 * 6 <= len(streamed) < len(SLOW_ANSWER)
    # The session is idle again and says so (the daemon's other sessions are other tests').
    with daemon.client("c") as c:
        sessions = c.call(SESSION_LIST).sessions
        assert [(s.id, s.status) for s in sessions if s.id == session_id] == [(session_id, "idle")]
        assert the_turn(read_snapshot(c, session_id), turn_id).status == "cancelled"
        # The cancelled turn asked the model nothing more: the next request, and the script's
        # next step, are the next turn's.
        attach(c, session_id)
        start_turn(c, session_id, "again")
        after = completed_items(collect_until_turn_end(c, session_id))
    assert [i.text for i in after if isinstance(i, AgentMessage)] == ["the next turn's answer"]
    assert len(model_server.requests) == 2
    assert model_server.requests[1]["messages"][-1] == {"role": "user", "content": "again"}


# --- 2. the client that started the turn goes away --------------------------------------------


@pytest.mark.shared_daemon
def test_turn_survives_its_client_disconnecting(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    final = numbered(60)
    model_server.set_script(
        {"steps": [READ_TOOLS, {"text": final, "chunks": 60, "hold_at_chunks": [3]}]}
    )
    with daemon.client("starter") as starter:
        session_id = create_session(starter)
        attach(starter, session_id)
        turn_id = start_turn(starter, session_id, "read and answer")
        read_events(starter, session_id, deltas_at_least(3))
    with daemon.client("later") as later, daemon.client("observer") as observer:
        # The starter is gone and the turn is still running ...
        assert the_turn(read_snapshot(later, session_id), turn_id).status == "running"
        attach(observer, session_id, role="observer")
        model_server.release()
        collect_until_turn_end(observer, session_id)
        # ... and it finished: an attach afterwards shows the whole answer.
        attached = attach(later, session_id)
        assert attached.mode == "snapshot"
        assert attached.snapshot is not None
        turn = the_turn(attached.snapshot, turn_id)
    assert turn.status == "completed"
    assert turn.error is None
    answers = [i for i in turn.items if isinstance(i, AgentMessage)]
    assert [a.text for a in answers] == [final]
    calls = [i for i in turn.items if isinstance(i, ToolCall)]
    assert [(c.tool, c.status) for c in calls] == [("read_file", "completed")] * 2
    assert len(model_server.requests) == 2


# --- 3. SIGKILL mid-turn ----------------------------------------------------------------------


def test_daemon_killed_mid_turn_leaves_an_interrupted_turn_with_its_finished_items(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
) -> None:
    model_server.set_script({"steps": [READ_TOOLS, HELD_STEP]})
    with daemon.client("a") as a:
        session_id = create_session(a)
        old = attach(a, session_id)
        turn_id = start_turn(a, session_id, "read both files")
        seen = read_events(a, session_id, deltas_at_least(10))
        # Events are written behind their sending: let the ones seen reach the database, so
        # that what the restart must keep is known (a kill may lose the last few otherwise).
        last = max(e.seq for e in seen if not isinstance(e.event, ItemDelta))
        wait_until(
            lambda: (
                max((seq for seq, _ in persisted_events(home, workspace, session_id)), default=0)
                >= last
            ),
            "the events seen persisted",
        )
        daemon.kill()
    calls_seen = {i.id: i for i in completed_items(seen) if isinstance(i, ToolCall)}
    assert len(calls_seen) == 2
    assert all(c.status == "completed" and c.output for c in calls_seen.values())

    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with restarted.client("b") as b:
            sessions = b.call(SESSION_LIST).sessions
            assert [(s.id, s.turn_count, s.status) for s in sessions] == [(session_id, 1, "idle")]
            snapshot = read_snapshot(b, session_id)
    finally:
        assert restarted.stop() == 0

    assert snapshot.epoch != old.epoch
    turn = the_turn(snapshot, turn_id)
    assert turn.status == "interrupted"
    assert turn.error is not None
    assert turn.error.code == "interrupted"
    assert turn.ended_at is not None
    users = [i for i in turn.items if isinstance(i, UserMessage)]
    assert [u.text for u in users] == ["read both files"]
    calls = {i.id: i for i in turn.items if isinstance(i, ToolCall)}
    assert calls == calls_seen
    assert sorted(c.output.splitlines()[0] for c in calls.values()) == [
        "1\t# Demo project",
        "1\tdef greet(name):",
    ]
    # The new epoch's stream goes on after every event persisted before the kill.
    assert snapshot.seq > last
    # The restarted daemon closed every item the dead one left open (the streaming answer
    # included), so no client waits on an item that can never complete.
    persisted = [event for _, event in persisted_events(home, workspace, session_id)]
    started = {e.item.id for e in persisted if isinstance(e, ItemStarted)}
    finished = {e.item.id for e in persisted if isinstance(e, ItemCompleted)}
    assert started == finished
    assert any(isinstance(i, AgentMessage) for i in turn.items)


# --- 4. SIGTERM mid-turn ----------------------------------------------------------------------


def test_sigterm_mid_turn_persists_interrupted_and_the_session_goes_on(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
) -> None:
    model_server.set_script({"steps": [READ_TOOLS, HELD_STEP, {"text": "Picking up again."}]})
    with daemon.client("a") as a:
        session_id = create_session(a)
        attach(a, session_id)
        turn_id = start_turn(a, session_id, "read both files")
        seen = read_events(a, session_id, deltas_at_least(10))
        code = daemon.stop_attached(a, timeout=10)
    assert code == 0
    calls_seen = {i.id: i for i in completed_items(seen) if isinstance(i, ToolCall)}
    assert len(calls_seen) == 2

    # The stopping daemon itself closed the turn as interrupted, on disk.
    persisted = persisted_events(home, workspace, session_id)
    last_seq, last = persisted[-1]
    assert isinstance(last, TurnCompleted)
    assert (last.turn_id, last.status) == (turn_id, "interrupted")
    assert running_turn_column(home, workspace, session_id) is None
    started = [e.item.id for _, e in persisted if isinstance(e, ItemStarted)]
    completed = [e.item.id for _, e in persisted if isinstance(e, ItemCompleted)]
    assert sorted(started) == sorted(completed)

    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with restarted.client("b") as b:
            before = read_snapshot(b, session_id)
            turn = the_turn(before, turn_id)
            assert turn.status == "interrupted"
            assert {i.id: i for i in turn.items if isinstance(i, ToolCall)} == calls_seen
            # The stream was persisted up to the interruption; restoring added nothing to it.
            assert before.seq == last_seq

            attach(b, session_id)
            next_turn = start_turn(b, session_id, "continue")
            events = collect_until_turn_end(b, session_id)
    finally:
        assert restarted.stop() == 0

    end = events[-1].event
    assert isinstance(end, TurnCompleted)
    assert (end.turn_id, end.status) == (next_turn, "completed")
    assert [i.text for i in completed_items(events) if isinstance(i, AgentMessage)] == [
        "Picking up again."
    ]
    messages: list[dict[str, Any]] = model_server.requests[-1]["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["read both files", "continue"]
    tool_calls_answered(messages)
    answered = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert answered == {c.call_id: c.output for c in calls_seen.values()}


# --- 5. a second turn continues the conversation ----------------------------------------------


@pytest.mark.shared_daemon
def test_second_turn_sends_the_first_turn_to_the_model(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {"steps": [{"text": "Paris.", "chunks": 2}, {"text": "About two million.", "chunks": 3}]}
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "What is the capital of France?")
        first = collect_until_turn_end(client, session_id)
        start_turn(client, session_id, "How many people live there?")
        second = collect_until_turn_end(client, session_id)
    for events in (first, second):
        last = events[-1].event
        assert isinstance(last, TurnCompleted)
        assert last.status == "completed"
    assert len(model_server.requests) == 2
    conversation = [
        (m["role"], m.get("content"))
        for m in model_server.requests[1]["messages"]
        if m["role"] != "system"
    ]
    assert conversation == [
        ("user", "What is the capital of France?"),
        ("assistant", "Paris."),
        ("user", "How many people live there?"),
    ]
    assert model_server.requests[1]["messages"][0]["role"] == "system"
