"""Attach, resume and resync against the real daemon: nothing lost, nothing doubled.

Every test drives the daemon subprocess over real websockets. Turns are held mid-stream by the
scripted model server (`hold_at_chunks`) so that a second client can join or leave while the
turn is still streaming. Deltas carry numbered text (`<0007>`), so a repeated or reordered
event changes the payload, not just its seq.
"""

from typing import Any

import msgspec
import pytest

from tests.inprocess import seqs_covered
from tests.support import (
    DaemonProcess,
    attach,
    collect_until_turn_end,
    completed_items,
    create_session,
    deltas_at_least,
    numbered,
    read_events,
    read_snapshot,
    start_turn,
)
from tether.clients.core.rpc import Client
from tether.protocol.events import ItemCompleted, ItemDelta, ItemStarted, TurnCompleted
from tether.protocol.items import AgentMessage, AnyItem, ToolCall
from tether.protocol.methods import (
    SESSION_LIST,
    SessionEventParams,
)
from tether.protocol.session import Cursor, SessionInfo
from tether.testing import ModelServer

_encode = msgspec.json.Encoder().encode


def held_text(count: int = 100, *holds: int) -> dict[str, Any]:
    """A streamed answer of `count` deltas that waits after the first ten (and after each of
    `holds` more) for `model_server.release()`: a second client joins or leaves mid-stream
    with no race against the stream, however busy the machine."""
    return {"text": numbered(count), "chunks": count, "hold_at_chunks": [10, *holds]}


TOOLS_THEN_HELD_TEXT = {
    "steps": [
        {
            "tool_calls": [
                {"name": "list_dir", "arguments": {"path": "."}},
                {"name": "read_file", "arguments": {"path": "README.md"}},
            ]
        },
        held_text(),
    ]
}


def key(event: SessionEventParams) -> tuple[str, int, str, bytes]:
    """Everything a client can observe about one event, comparable and readable in diffs."""
    return (event.session_id, event.seq, event.epoch, _encode(event.event))


def keys(events: list[SessionEventParams]) -> list[tuple[str, int, str, bytes]]:
    """The keys of `events` with every run of text deltas of one item folded into one (its
    last seq, its text joined): the same whether the daemon merged a lagging client's
    deltas or sent them one by one."""
    folded: list[SessionEventParams] = []
    for event in events:
        previous = folded[-1].event if folded else None
        now = event.event
        if (
            isinstance(now, ItemDelta)
            and isinstance(previous, ItemDelta)
            and now.progress is None
            and previous.progress is None
            and (now.turn_id, now.item_id) == (previous.turn_id, previous.item_id)
            and folded[-1].seq + 1 == (event.first_seq or event.seq)
        ):
            joined = msgspec.structs.replace(previous, delta=previous.delta + now.delta)
            folded[-1] = msgspec.structs.replace(event, event=joined, first_seq=None)
        else:
            folded.append(msgspec.structs.replace(event, first_seq=None))
    return [key(e) for e in folded]


def assert_gap_free(events: list[SessionEventParams], first_seq: int) -> None:
    """Every seq from `first_seq` on, once, in order: a merged delta (a client that fell
    behind) covers `firstSeq`..`seq`."""
    assert seqs_covered(events) == list(range(first_seq, events[-1].seq + 1))
    assert len({e.epoch for e in events}) == 1


def session_info(client: Client, session_id: str) -> SessionInfo:
    sessions = client.call(SESSION_LIST).sessions
    matching = [s for s in sessions if s.id == session_id]
    assert len(matching) == 1, sessions
    return matching[0]


def items_of(events: list[SessionEventParams], turn_id: str) -> list[AnyItem]:
    """A turn's items as a snapshot lists them: in start order, the latest copy of each."""
    items: dict[str, AnyItem] = {}
    for e in events:
        if isinstance(e.event, ItemStarted | ItemCompleted) and e.event.turn_id == turn_id:
            items[e.event.item.id] = e.event.item
    return list(items.values())


# --- 1. two clients see the same stream -------------------------------------------------------


@pytest.mark.shared_daemon
def test_two_attached_clients_see_identical_events(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                TOOLS_THEN_HELD_TEXT["steps"][0],
                {"text": numbered(30), "chunks": 30, "chunk_delay_ms": 2},
            ]
        }
    )
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attached_a = attach(a, session_id)
        attached_b = attach(b, session_id, role="observer")
        assert (attached_a.epoch, attached_a.from_seq) == (attached_b.epoch, 0)
        turn_id = start_turn(a, session_id, "look around")
        events_a = collect_until_turn_end(a, session_id)
        events_b = collect_until_turn_end(b, session_id)

    assert keys(events_b) == keys(events_a)
    assert_gap_free(events_a, 1)
    assert {e.epoch for e in events_a} == {attached_a.epoch}
    # The stream really had tool calls and streamed text in it.
    completed = [e.event.item for e in events_a if isinstance(e.event, ItemCompleted)]
    assert sorted(i.tool for i in completed if isinstance(i, ToolCall)) == ["list_dir", "read_file"]
    assert [i.text for i in completed if isinstance(i, AgentMessage)] == [numbered(30)]
    assert sum(isinstance(e.event, ItemDelta) for e in events_a) == 30
    last = events_a[-1].event
    assert isinstance(last, TurnCompleted)
    assert (last.turn_id, last.status) == (turn_id, "completed")


# --- 2. attaching mid-turn from seq 0 ---------------------------------------------------------


@pytest.mark.shared_daemon
def test_mid_turn_attach_from_seq_zero_replays_then_continues_live(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(TOOLS_THEN_HELD_TEXT)
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attach(a, session_id)
        start_turn(a, session_id, "go")
        head = read_events(a, session_id, deltas_at_least(10))

        before = read_snapshot(b, session_id)
        assert before.turns[-1].status == "running"
        attached = attach(b, session_id, after=Cursor(seq=0))
        assert (attached.mode, attached.from_seq, attached.snapshot) == ("replay", 0, None)
        assert attached.epoch == head[0].epoch
        model_server.release()
        events_b = collect_until_turn_end(b, session_id)
        events_a = head + collect_until_turn_end(a, session_id)

    # The turn was well under way when B attached, and B got it all, once, in order.
    assert before.seq < events_a[-1].seq - 50
    assert_gap_free(events_b, 1)
    assert keys(events_b) == keys(events_a)
    assert isinstance(events_b[-1].event, TurnCompleted)


# --- 3. reconnecting with a cursor ------------------------------------------------------------


@pytest.mark.shared_daemon
def test_reconnect_with_cursor_resumes_exactly_after_it(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [TOOLS_THEN_HELD_TEXT["steps"][0], held_text(100, 30)]})
    with daemon.client("reference") as reference:
        with daemon.client("a") as a:
            session_id = create_session(a)
            attach(reference, session_id, role="observer")
            attach(a, session_id)
            start_turn(a, session_id, "go")
            seen_by_a = read_events(a, session_id, deltas_at_least(10))
        cursor = Cursor(epoch=seen_by_a[-1].epoch, seq=seen_by_a[-1].seq)
        model_server.release()  # to the second hold, 20 deltas on

        with daemon.client("b") as b:
            # The turn goes on while nobody who started it is connected (the observer sees it).
            observed = read_events(
                reference, session_id, lambda e: e[-1:] != [] and e[-1].seq >= cursor.seq + 10
            )
            assert read_snapshot(b, session_id).turns[-1].status == "running"
            attached = attach(b, session_id, after=cursor)
            assert (attached.mode, attached.epoch, attached.from_seq) == (
                "replay",
                cursor.epoch,
                cursor.seq,
            )
            assert attached.snapshot is None
            model_server.release()
            seen_by_b = collect_until_turn_end(b, session_id)
        everything = observed + collect_until_turn_end(reference, session_id)

    assert seen_by_b[0].seq == cursor.seq + 1
    assert_gap_free(seen_by_b, cursor.seq + 1)
    assert isinstance(seen_by_b[-1].event, TurnCompleted)
    assert keys(seen_by_a + seen_by_b) == keys(everything)
    assert_gap_free(everything, 1)


# --- 4. a cursor from another epoch -----------------------------------------------------------


@pytest.mark.shared_daemon
def test_cursor_from_another_epoch_gets_a_snapshot_then_live_events(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                TOOLS_THEN_HELD_TEXT["steps"][0],
                {"text": "It greets."},
                held_text(),
            ]
        }
    )
    with daemon.client("a") as a, daemon.client("b") as b:
        session_id = create_session(a)
        attached_a = attach(a, session_id)
        first_turn = start_turn(a, session_id, "what is this?")
        turn_one = collect_until_turn_end(a, session_id)
        second_turn = start_turn(a, session_id, "say more")
        head = read_events(a, session_id, deltas_at_least(10))

        stale = Cursor(epoch="0" * 16, seq=head[-1].seq)
        assert stale.epoch != attached_a.epoch
        attached = attach(b, session_id, after=stale)
        model_server.release()
        events_b = collect_until_turn_end(b, session_id)
        everything = turn_one + head + collect_until_turn_end(a, session_id)

    assert attached.mode == "snapshot"
    snapshot = attached.snapshot
    assert snapshot is not None
    assert (snapshot.seq, snapshot.epoch) == (attached.from_seq, attached_a.epoch)
    assert attached.epoch == attached_a.epoch
    # The first turn's completed items, exactly as the stream delivered them.
    assert [t.id for t in snapshot.turns] == [first_turn, second_turn]
    done, running = snapshot.turns
    assert done.status == "completed"
    assert done.items == items_of(turn_one, first_turn)
    assert [type(i).__name__ for i in done.items] == [
        "UserMessage",
        "ToolCall",
        "ToolCall",
        "AgentMessage",
        "TurnSummary",
    ]
    assert all(i.status == "completed" and i.output for i in done.items if isinstance(i, ToolCall))
    assert running.status == "running"
    # Live events continue right after the snapshot, and nothing is missing.
    assert_gap_free(events_b, attached.from_seq + 1)
    assert keys(events_b) == keys([e for e in everything if e.seq > attached.from_seq])
    # The streamed-so-far text in the snapshot plus the deltas after it is the whole answer.
    partial = [i for i in running.items if isinstance(i, AgentMessage)]
    assert len(partial) == 1
    later = "".join(
        e.event.delta
        for e in events_b
        if isinstance(e.event, ItemDelta) and e.event.item_id == partial[0].id
    )
    assert partial[0].text
    assert partial[0].text + later == numbered(100)


# --- 5. snapshots: attach without cursor, and session/read ------------------------------------


@pytest.mark.shared_daemon
def test_attach_without_cursor_and_read_give_the_same_snapshot_read_does_not_subscribe(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {"steps": [TOOLS_THEN_HELD_TEXT["steps"][0], {"text": "first"}, {"text": "second"}]}
    )
    with daemon.client("a") as a, daemon.client("b") as b, daemon.client("reader") as reader:
        session_id = create_session(a)
        attach(a, session_id)
        start_turn(a, session_id, "one")
        turn_one = collect_until_turn_end(a, session_id)

        attached = attach(b, session_id)
        assert attached.mode == "snapshot"
        assert attached.snapshot is not None
        assert attached.from_seq == attached.snapshot.seq == turn_one[-1].seq
        read = read_snapshot(reader, session_id)
        assert read == attached.snapshot
        assert len(read.turns) == 1
        assert read.turns[0].status == "completed"

        start_turn(a, session_id, "two")
        turn_two = collect_until_turn_end(a, session_id)
        assert keys(collect_until_turn_end(b, session_id)) == keys(turn_two)
        # Anything the daemon sent the reader during turn two is queued ahead of this answer.
        after = read_snapshot(reader, session_id)
        assert [t.status for t in after.turns] == ["completed", "completed"]
        assert after.seq == turn_two[-1].seq
        with pytest.raises(TimeoutError):
            reader.next_notification(timeout=0.3)


# --- 6. a client that reads nothing while a long answer streams gets it merged ------------------


FLOOD_DELTAS = 6000
"""About 1 MB of frames, more than 4,096 of them: far beyond what the sockets buffer."""


def streamed(events: list[SessionEventParams]) -> str:
    return "".join(e.event.delta for e in events if isinstance(e.event, ItemDelta))


def test_a_client_that_reads_nothing_during_a_long_answer_gets_it_merged_not_resynced(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    answer = "".join(f"<{i:04d}>.." for i in range(FLOOD_DELTAS))
    model_server.set_script({"steps": [{"text": answer, "chunks": FLOOD_DELTAS}]})
    with daemon.client("fast") as fast, daemon.client("slow") as slow:
        session_id = create_session(fast)
        attach(fast, session_id)
        assert attach(slow, session_id).from_seq == 0
        # `slow` reads nothing while the turn streams; `fast` reads as fast as it can. The
        # turn never waits for `slow`: it completes while `slow` has read nothing at all.
        start_turn(fast, session_id, "flood")
        full = collect_until_turn_end(fast, session_id)
        last = full[-1].event
        assert isinstance(last, TurnCompleted)
        assert last.status == "completed"

        # Now `slow` reads: every event once, in order, its waiting deltas merged; no resync.
        late = collect_until_turn_end(slow, session_id)
        for events in (full, late):
            assert seqs_covered(events) == list(range(1, full[-1].seq + 1))
            assert streamed(events) == answer
            messages = [i for i in completed_items(events) if isinstance(i, AgentMessage)]
            assert [m.text for m in messages] == [answer]
        assert sum(e.first_seq is not None for e in late) > 0
        assert [e for e in late if not isinstance(e.event, ItemDelta)] == [
            e for e in full if not isinstance(e.event, ItemDelta)
        ]
        # Nothing else is pending for `slow`: no stray events, no resync.
        assert read_snapshot(slow, session_id).seq == full[-1].seq
        with pytest.raises(TimeoutError):
            slow.next_notification(timeout=0.2)


# --- 7. session/list status ---------------------------------------------------------------------


@pytest.mark.shared_daemon
def test_session_list_shows_running_then_idle(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [held_text(50)]})
    with daemon.client() as client:
        session_id = create_session(client)
        created = session_info(client, session_id)
        assert (created.status, created.turn_count) == ("idle", 0)
        attach(client, session_id)
        start_turn(client, session_id, "go")
        running = session_info(client, session_id)
        assert (running.status, running.turn_count) == ("running", 1)
        model_server.release()
        events = collect_until_turn_end(client, session_id)
        assert isinstance(events[-1].event, TurnCompleted)
        done = session_info(client, session_id)
        assert (done.status, done.turn_count) == ("idle", 1)
        assert done.title == "go"
