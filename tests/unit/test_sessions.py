"""The daemon's sessions in-process: a real store in a temporary folder, real tools over a
temporary workspace, the scripted model server over real HTTP, and a recording subscriber in
place of a connection."""

import gc
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
import trio

from tests.inprocess import Watcher
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.todo_write import TODOS_SERVICE
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    ApprovalRequested,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
    TurnStarted,
)
from tether.protocol.items import (
    AgentMessage,
    Compaction,
    FileChange,
    Notice,
    TurnSummary,
    UserMessage,
)
from tether.protocol.methods import SessionCompactResult
from tether.protocol.session import Cursor
from tether.testing import ModelServer

PAUSE = {
    "tool_calls": [
        {"name": "run_command", "arguments": {"command": "echo hi", "description": "say hi"}}
    ]
}
"""A step whose call asks for approval (mode `edits`): the turn waits until it is answered."""


class Rig:
    def __init__(self, sessions: Sessions, server: ModelServer, workspace: Path) -> None:
        self.sessions = sessions
        self.server = server
        self.workspace = workspace

    async def turn(self, session: Session, text: str, *mentions: str) -> None:
        """Send a message the way `turn/start` does, and wait for the turn to end."""
        turn_input = await self.sessions.turn_input(editor=None, mentions=mentions)
        self.sessions.start_turn(session, TurnRequest(text=text, turn_input=turn_input))
        await self.sessions.wait_idle(session.id)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    with ModelServer({"steps": [{"text": "unused"}]}) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        sessions = Sessions(
            store=store,
            workspace=workspace,
            model=client,
            tools=ToolRegistry(default_tools()),
            keep_idle=2,
        )
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    await nursery.start(sessions.serve)
                    yield Rig(sessions, server, workspace)
                    await sessions.interrupt_all()
                    nursery.cancel_scope.cancel()
        finally:
            await client.aclose()
            store.close()


def user_messages(session: Session) -> list[UserMessage]:
    return [item for item in session.items() if isinstance(item, UserMessage)]


# --- the loaded-session cache ------------------------------------------------------------------


async def test_an_idle_session_is_unloaded_and_reloads_with_identical_items(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "hello there"}], "loop": True})
    sessions = rig.sessions
    watcher = Watcher()
    session = await sessions.create()
    session.attach(watcher, "controller", None)
    await rig.turn(session, "hi")
    items, turns, last = session.items(), session.snapshot().turns, session.seq
    assert [type(i).__name__ for i in items][:2] == ["UserMessage", "AgentMessage"]

    # Attached, it stays loaded however many other sessions are used.
    for _ in range(3):
        await sessions.create()
    assert await sessions.get(session.id) is session
    session.detach(watcher)
    for _ in range(2):
        await sessions.create()
    assert sessions.loaded_count == 2

    again = await sessions.get(session.id)
    assert again is not session
    assert again.items() == items
    assert again.snapshot().turns == turns
    assert again.seq == last
    # A new epoch: the old one's ring is gone, so the old cursor gets a snapshot.
    assert again.epoch != session.epoch
    result, replay = again.attach(Watcher(), "observer", Cursor(epoch=session.epoch, seq=last))
    assert (result.mode, replay) == ("snapshot", [])
    assert result.snapshot is not None
    assert result.snapshot.turns == turns

    # The reloaded session goes on where it was.
    await rig.turn(again, "and again")
    assert [m.text for m in user_messages(again)] == ["hi", "and again"]
    sent = rig.server.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "hi"),
        ("assistant", "hello there"),
        ("user", "and again"),
    ]


async def test_an_unloaded_session_is_freed_at_once(rig: Rig) -> None:
    # Without the cycle collector: what an unloaded session held (its ring of frames, its
    # items, its history) is freed when it is unloaded, not at some later collection.
    rig.server.set_script({"steps": [{"text": "hello there"}], "loop": True})
    sessions = rig.sessions
    session = await sessions.create()
    watcher = Watcher()
    session.attach(watcher, "controller", None)
    await rig.turn(session, "hi")
    session.detach(watcher)
    unloaded = weakref.ref(session)
    history = weakref.ref(sessions._live[session.id].history)
    del session
    gc.collect()
    gc.disable()
    try:
        for _ in range(2):
            await sessions.create()
        assert (unloaded(), history()) == (None, None)
    finally:
        gc.enable()


async def test_a_session_with_a_running_turn_stays_loaded(rig: Rig) -> None:
    rig.server.set_script({"steps": [PAUSE, {"text": "done"}]})
    sessions = rig.sessions
    watcher = Watcher()
    session = await sessions.create()
    session.attach(watcher, "controller", None)
    sessions.start_turn(session, TurnRequest(text="go"))
    request = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(request, ApprovalRequested)
    session.detach(watcher)
    for _ in range(4):
        await sessions.create()
    assert await sessions.get(session.id) is session

    broker = await sessions.broker(session.id)
    broker.respond(request.approval.id, decision="deny", scope="once", by="test")
    await sessions.wait_idle(session.id)
    for _ in range(2):
        await sessions.create()
    assert await sessions.get(session.id) is not session


# --- cursors across epochs ---------------------------------------------------------------------


async def test_a_cursor_without_an_epoch_gets_a_snapshot_after_a_crash(tmp_path: Path) -> None:
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    try:
        row = SessionRow("s_1", "", 0.0, 0.0, 0, None)
        store.create_session_nowait(row)
        session = Session(row, store)
        # From the beginning, in the epoch the session was created in: replayed.
        result, replay = session.attach(Watcher(), "controller", Cursor(seq=0))
        assert (result.mode, replay) == ("replay", [])
        session.emit(TurnStarted(turn_id="t_1", started_at=1.0))
        session.emit(ItemStarted(turn_id="t_1", item=AgentMessage(id="i_1", step=1)))
        for delta in ("stream", "ed"):
            session.emit(ItemDelta(turn_id="t_1", item_id="i_1", delta=delta))
        seen = session.seq - 1  # a client that saw the first delta

        # The daemon is killed now: the next one loads what the store holds, in a new epoch,
        # numbering on from the last persisted event, so its seq 3 is another event.
        await store.flush()
        restarted = Session.restore(row, store, await store.load_events(row.id))
        assert restarted.seq >= seen
        assert restarted.turns[-1].status == "interrupted"

        for cursor in (Cursor(seq=seen), Cursor(seq=0)):
            result, replay = restarted.attach(Watcher(), "observer", cursor)
            assert (result.mode, replay) == ("snapshot", []), cursor
            assert result.snapshot is not None
            assert result.snapshot.turns[-1].status == "interrupted"
        # In the new epoch, a cursor is as good as ever.
        result, replay = restarted.attach(
            Watcher(), "observer", Cursor(epoch=restarted.epoch, seq=restarted.seq - 1)
        )
        assert (result.mode, len(replay)) == ("replay", 1)
    finally:
        store.close()


# --- queued input ------------------------------------------------------------------------------


async def test_a_message_queued_mid_turn_joins_with_its_mentions(rig: Rig) -> None:
    (rig.workspace / "notes.txt").write_text("the launch code is 4242\n")
    rig.server.set_script({"steps": [PAUSE, {"text": "noted"}]})
    sessions = rig.sessions
    watcher = Watcher()
    session = await sessions.create()
    session.attach(watcher, "controller", None)
    sessions.start_turn(session, TurnRequest(text="go"))
    request = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(request, ApprovalRequested)

    turn_input = await sessions.turn_input(editor=None, mentions=["notes.txt", "missing.txt"])
    queued = sessions.start_turn(
        session, TurnRequest(text="also read @notes.txt", turn_input=turn_input)
    )
    assert queued.queued
    [problem] = queued.problems
    assert problem.startswith("missing.txt: ")
    assert problem.endswith("; not attached")
    assert "4242" in session.snapshot().queued_inputs[0].context

    broker = await sessions.broker(session.id)
    broker.respond(request.approval.id, decision="deny", scope="once", by="test")
    await sessions.wait_idle(session.id)

    joined = user_messages(session)[-1]
    assert (joined.id, joined.text) == (queued.input_id, "also read @notes.txt")
    assert "4242" in joined.context
    last = rig.server.requests[-1]["messages"][-1]
    assert last["role"] == "user"
    assert "4242" in last["content"]
    assert last["content"].endswith("also read @notes.txt")


async def test_instructions_count_as_sent_only_once_they_join(rig: Rig) -> None:
    agents = rig.workspace / "AGENTS.md"
    agents.write_text("Use tabs.\n")
    rig.server.set_script({"steps": [PAUSE, {"text": "one"}, {"text": "two"}]})
    sessions = rig.sessions
    watcher = Watcher()
    session = await sessions.create()
    session.attach(watcher, "controller", None)
    first = await sessions.turn_input(editor=None, mentions=[])
    sessions.start_turn(session, TurnRequest(text="go", turn_input=first))
    await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))

    # Queued with changed instructions, then dropped when the turn is cancelled: the next
    # message must carry them.
    agents.write_text("Use spaces.\n")
    dropped = await sessions.turn_input(editor=None, mentions=[])
    sessions.start_turn(session, TurnRequest(text="never joins", turn_input=dropped))
    sessions.cancel_turn(session, None)
    await sessions.wait_idle(session.id)
    assert not session.queued_inputs

    await rig.turn(session, "next")
    contexts = [m.context for m in user_messages(session)]
    assert [("Use tabs." in c, "Use spaces." in c) for c in contexts] == [
        (True, False),
        (False, True),
    ]
    assert "Use spaces." in rig.server.requests[-1]["messages"][-1]["content"]

    # Unchanged instructions are not sent again, also after the session was reloaded.
    session.detach(watcher)
    for _ in range(3):
        await sessions.create()
    again = await sessions.get(session.id)
    assert again is not session
    await rig.turn(again, "once more")
    assert user_messages(again)[-1].context == ""


# --- manual compaction -------------------------------------------------------------------------

LONG_REQUEST = "please look into the greeting; " + "here is some background. " * 80
SUMMARY = "## User requests\n- look into the greeting (open)"


async def compacted_session(rig: Rig, *steps: dict[str, object]) -> tuple[Session, Watcher]:
    rig.server.set_script({"steps": [{"text": "sure"}, *steps]})
    session = await rig.sessions.create()
    watcher = Watcher()
    session.attach(watcher, "controller", None)
    await rig.turn(session, LONG_REQUEST)
    return session, watcher


def compactions(session: Session) -> list[Compaction]:
    return [item for item in session.items() if isinstance(item, Compaction)]


async def test_a_manual_compaction_that_shrinks_the_context(rig: Rig) -> None:
    session, _ = await compacted_session(rig, {"text": SUMMARY})
    result = await rig.sessions.compact(session)
    assert result.compacted
    assert result.reason == ""
    assert result.tokens_after < result.tokens_before
    assert [c.summary for c in compactions(session)] == [SUMMARY]
    assert session.turns[-1].status == "completed"


async def test_a_short_conversation_is_left_alone(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "sure"}]})
    session = await rig.sessions.create()
    await rig.turn(session, "hi")
    turns = len(session.turns)
    result = await rig.sessions.compact(session)
    assert (result.compacted, result.tokens_after) == (False, result.tokens_before)
    assert "too short" in result.reason
    assert len(session.turns) == turns
    assert len(rig.server.requests) == 1


async def test_a_summary_longer_than_what_it_replaces_changes_nothing(rig: Rig) -> None:
    session, _ = await compacted_session(rig, {"text": "much longer summary " * 200})
    before = session.info().turn_count
    result = await rig.sessions.compact(session)
    assert (result.compacted, result.tokens_after) == (False, result.tokens_before)
    assert "would not be shorter" in result.reason
    assert compactions(session) == []
    assert session.info().turn_count == before + 1
    notices = [i for i in session.turns[-1].items.values() if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["compaction_skipped"]


@pytest.mark.parametrize(
    ("step", "code"),
    [
        ({"text": ""}, ErrorCode.COMPACTION_FAILED),
        ({"error": {"status": 400, "message": "bad request"}}, ErrorCode.MODEL_UNAVAILABLE),
    ],
)
async def test_a_failed_summary_is_a_typed_error_and_stores_no_compaction(
    rig: Rig, step: dict[str, object], code: ErrorCode
) -> None:
    session, watcher = await compacted_session(rig, step, {"text": "after"})
    with pytest.raises(RpcError) as caught:
        await rig.sessions.compact(session)
    assert caught.value.code == code
    assert compactions(session) == []
    assert session.turns[-1].status == "failed"
    assert session.turns[-1].error is not None

    # Nothing was replaced: the next turn sends the whole conversation; the store agrees.
    await rig.turn(session, "go on")
    assert LONG_REQUEST in rig.server.requests[-1]["messages"][1]["content"]
    session.detach(watcher)
    for _ in range(3):
        await rig.sessions.create()
    again = await rig.sessions.get(session.id)
    assert again is not session
    assert compactions(again) == []
    assert again.turns[-2].status == "failed"


async def test_a_cancelled_compaction_changes_nothing(rig: Rig) -> None:
    session, watcher = await compacted_session(
        rig, {"text": SUMMARY, "delay_ms": 600_000}, {"text": "after"}
    )
    results: list[SessionCompactResult] = []

    async def compact() -> None:
        results.append(await rig.sessions.compact(session))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(compact)
        # Cancelled once the model is answering it: a request given up on before the model
        # read it would take no step, and the next turn would get the summary's.
        await trio.to_thread.run_sync(rig.server.wait_for_requests, 2)
        # A message sent meanwhile is refused, not queued for a turn that never takes it.
        with pytest.raises(RpcError) as busy:
            rig.sessions.start_turn(session, TurnRequest(text="hello?"))
        assert busy.value.code == ErrorCode.SESSION_BUSY
        assert not session.queued_inputs
        rig.sessions.cancel_turn(session, None)
    [result] = results
    assert (result.compacted, result.reason) == (False, "cancelled")
    ended = [e for e in watcher.events if isinstance(e, TurnCompleted)]
    assert ended[-1].status == "cancelled"
    assert compactions(session) == []

    await rig.turn(session, "go on")
    assert LONG_REQUEST in rig.server.requests[-1]["messages"][1]["content"]


# --- what the daemon hands in --------------------------------------------------------------


class Board:
    """A service a tool finds in its context, beside the session's own todo board."""


class Tracker:
    """A change tracker that reports one changed file and counts the turns it served."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    async def before_write(self, path: Path) -> None:
        return None

    def after_write(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        return None

    def files_changed(self) -> list[FileChange]:
        return [FileChange(path="a.txt", added=1)]


async def test_services_tracker_and_turn_end_are_handed_in_at_construction(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    tracker = Tracker()
    ended: list[int] = []
    seen: list[object] = []

    class Spy:
        name: ClassVar[str] = "spy"
        description: ClassVar[str] = "records the services it is given"
        kind: ClassVar[ToolKind] = "read"
        params: ClassVar[type[ToolParams]] = ToolParams

        async def run(self, params: ToolParams, ctx: ToolContext) -> str:
            seen.extend([ctx.services.get("board"), ctx.services.get(TODOS_SERVICE)])
            return "seen"

    def track(session: Session, turn_id: str) -> Tracker:
        tracker.turns.append(turn_id)
        return tracker

    steps: list[object] = [{"tool_calls": [{"name": "spy", "arguments": {}}]}, {"text": "done"}]
    with ModelServer({"steps": steps}) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        board = Board()
        sessions = Sessions(
            store=store,
            workspace=workspace,
            model=client,
            tools=ToolRegistry([Spy()]),
            services={"board": board},
            change_tracker=track,
            on_turn_end=lambda: ended.append(len(ended)),
        )
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    await nursery.start(sessions.serve)
                    session = await sessions.create()
                    started = sessions.start_turn(session, TurnRequest(text="go"))
                    await sessions.wait_idle(session.id)
                    nursery.cancel_scope.cancel()
        finally:
            await client.aclose()
            store.close()
    assert tracker.turns == [started.turn_id]
    assert ended == [0]
    assert seen[0] is board
    assert seen[1] is not None
    summary = [item for item in session.items() if isinstance(item, TurnSummary)]
    assert [s.files_changed for s in summary] == [tracker.files_changed()]
