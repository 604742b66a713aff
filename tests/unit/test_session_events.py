"""A session's event stream in-process: `emit` numbering and folding, `attach` replaying or
snapshotting, subscribers. A real store in a temporary folder; the test emits the events a turn
would, and recording subscribers stand in for connections."""

import msgspec
import pytest

from tests.inprocess import Recorder, bare_session, decode_event
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    SessionConfigured,
    SessionRenamed,
    TodoEntry,
    TodosUpdated,
    TurnStarted,
)
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.session import Cursor

MEGABYTE = "x" * (1024 * 1024)


def approval(approval_id: str, item_id: str = "c_1") -> ApprovalRequest:
    return ApprovalRequest(
        id=approval_id,
        turn_id="t_1",
        item_id=item_id,
        tool="run_command",
        arguments='{"command": "ls"}',
        kind="command",
        reason="commands ask in edits mode",
    )


def a_turn_in_progress(session: Session) -> list[int]:
    """Emit what a turn does up to a point where it streams text and waits on an approval."""
    events: list[AnyEvent] = [
        TurnStarted(turn_id="t_1", started_at=1.0),
        ItemStarted(turn_id="t_1", item=UserMessage(id="u_1", text="hi")),
        ItemCompleted(turn_id="t_1", item=UserMessage(id="u_1", text="hi")),
        ItemStarted(turn_id="t_1", item=AgentMessage(id="m_1", step=1)),
        ItemDelta(turn_id="t_1", item_id="m_1", delta="Let me "),
        ItemDelta(turn_id="t_1", item_id="m_1", delta="look."),
        ItemStarted(
            turn_id="t_1",
            item=ToolCall(id="c_1", call_id="k_1", tool="run_command", arguments="{}", step=1),
        ),
        ItemDelta(turn_id="t_1", item_id="c_1", delta="line 1\n"),
        ApprovalRequested(approval=approval("a_1")),
        ApprovalRequested(approval=approval("a_2")),
        ApprovalResolved(approval_id="a_1", turn_id="t_1", decision="allow", by="me"),
        TodosUpdated(todos=[TodoEntry(content="read", status="in_progress")]),
        InputQueued(input_id="u_2", text="also this", by="cli", context="ctx"),
        SessionRenamed(title="Looking around"),
        SessionConfigured(permission_mode="auto"),
        SessionConfigured(model="big-model"),
    ]
    return [session.emit(event) for event in events]


# --- emit ------------------------------------------------------------------------------------


async def test_emit_numbers_gap_free_in_one_epoch_and_persists_what_is_not_ephemeral(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    watcher = Recorder()
    session.attach(watcher, "controller", None)
    seqs = a_turn_in_progress(session)
    assert seqs == list(range(1, len(seqs) + 1))
    assert session.seq == seqs[-1]
    params = [decode_event(frame) for frame in watcher.frames]
    assert [(p.session_id, p.epoch, p.seq) for p in params] == [
        (session.id, session.epoch, seq) for seq in seqs
    ]
    # The frames a subscriber gets are the ones the ring keeps, byte for byte.
    assert session.ring.since(0) == watcher.frames

    await sqlite_store.flush()
    stored = await sqlite_store.load_events(session.id)
    deltas = {p.seq for p in params if isinstance(p.event, ItemDelta)}
    assert [seq for seq, _ in stored] == [s for s in seqs if s not in deltas]


async def test_a_restored_session_numbers_on_from_the_store_in_a_new_epoch(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    a_turn_in_progress(session)
    await sqlite_store.flush()
    row = (await sqlite_store.list_sessions())[0]
    restored = Session.restore(row, sqlite_store, await sqlite_store.load_events(session.id))
    assert restored.epoch != session.epoch
    assert (restored.permission_mode, restored.model) == ("auto", "big-model")
    # Closing the interrupted turn numbers on from the last persisted event, without a gap.
    closing = restored.ring.since(session.seq)
    assert closing is not None
    assert [decode_event(f).seq for f in closing] == list(range(session.seq + 1, restored.seq + 1))
    assert restored.turns[-1].status == "interrupted"
    watcher = Recorder()
    restored.attach(watcher, "controller", Cursor(epoch=restored.epoch, seq=restored.seq))
    restored.emit(SessionRenamed(title="again"))
    assert watcher.seqs == [restored.seq]


async def test_emit_folds_every_event_into_the_state(sqlite_store: Store) -> None:
    session = bare_session(sqlite_store)
    a_turn_in_progress(session)
    assert session.running_turn_id == "t_1"
    assert session.title == "Looking around"
    # A later `session_configured` changes only what it names.
    assert (session.permission_mode, session.model) == ("auto", "big-model")
    assert list(session.pending_approvals) == ["a_2"]
    assert list(session.resolved_approvals) == ["a_1"]
    assert [q.text for q in session.queued_inputs.values()] == ["also this"]

    # The queued input joins as a user message with its id; the message completes.
    session.emit(ItemStarted(turn_id="t_1", item=UserMessage(id="u_2", text="also this")))
    assert session.queued_inputs == {}
    session.emit(ItemCompleted(turn_id="t_1", item=AgentMessage(id="m_1", step=1, text="Done.")))
    turn = session.turns[-1]
    assert "m_1" not in turn.partial
    assert "m_1" not in turn.open_items
    assert turn.items["m_1"] == AgentMessage(id="m_1", step=1, text="Done.")


# --- the snapshot ----------------------------------------------------------------------------


async def test_the_snapshot_holds_the_turn_in_progress_and_what_waits(sqlite_store: Store) -> None:
    session = bare_session(sqlite_store)
    a_turn_in_progress(session)
    snapshot = session.snapshot()
    assert (snapshot.epoch, snapshot.seq) == (session.epoch, session.seq)
    assert snapshot.session.status == "running"
    assert snapshot.session.title == "Looking around"
    [turn] = snapshot.turns
    assert turn.status == "running"
    by_id = {item.id: item for item in turn.items}
    assert list(by_id) == ["u_1", "m_1", "c_1"]
    message, call = by_id["m_1"], by_id["c_1"]
    assert isinstance(message, AgentMessage)
    assert message.text == "Let me look."
    assert isinstance(call, ToolCall)
    assert (call.status, call.output) == ("running", "line 1\n")
    assert [a.id for a in snapshot.pending_approvals] == ["a_2"]
    assert snapshot.todos == [TodoEntry(content="read", status="in_progress")]
    [queued] = snapshot.queued_inputs
    assert (queued.input_id, queued.text, queued.by, queued.context) == (
        "u_2",
        "also this",
        "cli",
        "ctx",
    )
    # The partial text is a view: the state itself still holds the started item.
    assert session.turns[-1].items["m_1"] == AgentMessage(id="m_1", step=1)


async def test_a_snapshot_plus_the_events_after_it_is_the_live_state(sqlite_store: Store) -> None:
    session = bare_session(sqlite_store)
    session.emit(TurnStarted(turn_id="t_1", started_at=1.0))
    session.emit(ItemStarted(turn_id="t_1", item=AgentMessage(id="m_1", step=1)))
    session.emit(ItemDelta(turn_id="t_1", item_id="m_1", delta="half "))
    late = Recorder()
    result, replay = session.attach(late, "observer", None)
    assert (result.mode, result.from_seq, replay) == ("snapshot", session.seq, [])
    session.emit(ItemDelta(turn_id="t_1", item_id="m_1", delta="whole"))
    assert late.seqs == [result.from_seq + 1]
    assert result.snapshot is not None
    [seen] = result.snapshot.turns[0].items
    assert isinstance(seen, AgentMessage)
    delta = late.events[0]
    assert isinstance(delta, ItemDelta)
    assert seen.text + delta.delta == "half whole"


# --- attach ----------------------------------------------------------------------------------


async def test_a_cursor_in_this_epoch_replays_exactly_the_missed_frames(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    always = Recorder()
    session.attach(always, "controller", None)
    seqs = a_turn_in_progress(session)
    for seen in (0, 1, 7, seqs[-1] - 1, seqs[-1]):
        result, replay = session.attach(
            Recorder(), "observer", Cursor(epoch=session.epoch, seq=seen)
        )
        assert (result.mode, result.from_seq, result.snapshot) == ("replay", seen, None)
        assert replay == always.frames[seen:], seen


def unusable_cursor(session: Session, kind: str) -> Cursor:
    if kind == "another-epoch":
        return Cursor(epoch="0" * 16, seq=3)
    if kind == "beyond-the-last-event":
        return Cursor(epoch=session.epoch, seq=session.seq + 1)
    return Cursor(seq=3)


@pytest.mark.parametrize("kind", ["another-epoch", "beyond-the-last-event", "no-epoch"])
async def test_a_cursor_that_cannot_be_replayed_gets_a_snapshot(
    sqlite_store: Store, kind: str
) -> None:
    session = bare_session(sqlite_store)
    a_turn_in_progress(session)
    result, replay = session.attach(Recorder(), "observer", unusable_cursor(session, kind))
    assert (result.mode, result.from_seq, replay) == ("snapshot", session.seq, [])
    assert result.snapshot == session.snapshot()


async def test_a_cursor_older_than_the_ring_gets_a_snapshot(sqlite_store: Store) -> None:
    session = bare_session(sqlite_store)
    session.emit(TurnStarted(turn_id="t_1", started_at=1.0))
    session.emit(ItemStarted(turn_id="t_1", item=AgentMessage(id="m_1", step=1)))
    # More than the ring's 8 MiB of deltas: the first frames fall out.
    for _ in range(9):
        session.emit(ItemDelta(turn_id="t_1", item_id="m_1", delta=MEGABYTE))
    held, size = session.ring.statistics()
    assert held < session.seq
    assert size <= 8 * 1024 * 1024
    oldest_replayable = session.seq - held
    result, _ = session.attach(Recorder(), "observer", Cursor(epoch=session.epoch, seq=1))
    assert result.mode == "snapshot"
    result, replay = session.attach(
        Recorder(), "observer", Cursor(epoch=session.epoch, seq=oldest_replayable)
    )
    assert (result.mode, len(replay)) == ("replay", held)
    # Seq 0 without an epoch means "everything": no longer in the ring, so a snapshot.
    result, _ = session.attach(Recorder(), "observer", Cursor(seq=0))
    assert result.mode == "snapshot"


async def test_a_replay_larger_than_the_subscriber_can_take_is_a_snapshot(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    a_turn_in_progress(session)
    cursor = Cursor(epoch=session.epoch, seq=1)
    _, replay = session.attach(Recorder(), "observer", cursor)
    size = sum(map(len, replay))
    result, frames = session.attach(Recorder(), "observer", cursor, replay_bytes=size)
    assert (result.mode, frames) == ("replay", replay)
    result, frames = session.attach(Recorder(), "observer", cursor, replay_bytes=size - 1)
    assert (result.mode, frames, result.from_seq) == ("snapshot", [], session.seq)
    assert result.snapshot == session.snapshot()


# --- subscribers -----------------------------------------------------------------------------


async def test_each_subscriber_gets_each_frame_once_also_after_attaching_again(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    first, second = Recorder(), Recorder()
    session.attach(first, "controller", None)
    session.emit(TurnStarted(turn_id="t_1", started_at=1.0))
    session.attach(second, "observer", Cursor(epoch=session.epoch, seq=0))
    # Attaching again (a client re-attaching with its cursor) does not subscribe it twice.
    _, replay = session.attach(first, "controller", Cursor(epoch=session.epoch, seq=1))
    assert replay == []
    session.emit(SessionRenamed(title="t"))
    assert first.seqs == [1, 2]
    assert second.seqs == [2]
    assert session.detach(second)
    assert not session.detach(second)
    session.emit(SessionRenamed(title="u"))
    assert (first.seqs, second.seqs) == ([1, 2, 3], [2])


async def test_a_subscriber_that_falls_behind_is_dropped_and_catches_up_from_its_cursor(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    slow, fast = Recorder(room=3), Recorder()
    changes: list[int] = []
    session.on_subscribers = lambda: changes.append(len(session.subscribers))
    session.attach(slow, "observer", None)
    session.attach(fast, "controller", None)
    seqs = a_turn_in_progress(session)
    assert fast.seqs == seqs
    assert slow.seqs == seqs[:3]
    assert slow not in session.subscribers
    assert changes == [1, 2, 1]
    [notice] = slow.control
    assert msgspec.json.decode(notice)["method"] == "session/resync"

    cursor = decode_event(slow.frames[-1])
    slow.room = None
    result, replay = session.attach(slow, "observer", Cursor(epoch=cursor.epoch, seq=cursor.seq))
    assert result.mode == "replay"
    assert slow.frames + replay == fast.frames
