"""Forking and renaming sessions, and reading their event log, in-process: a real store in a
temporary folder, real tools over a temporary workspace, the scripted model server over real
HTTP."""

import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import msgspec
import pytest
import trio

from tests.inprocess import Watcher, running_sessions
from tether.daemon.sessions.eventlog import read_events
from tether.daemon.sessions.fork import fork_session
from tether.daemon.sessions.images import ImageStore
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session, event_decoder
from tether.daemon.sessions.store import Store
from tether.daemon.sessions.titles import rename
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import ApprovalRequested, SessionRenamed
from tether.protocol.items import AgentMessage, Compaction, ToolCall, UserMessage
from tether.protocol.methods import EventRecord, SessionEventsParams
from tether.protocol.session import ForkOrigin
from tether.testing import ModelServer


class Rig:
    def __init__(self, sessions: Sessions, server: ModelServer, workspace: Path) -> None:
        self.sessions = sessions
        self.server = server
        self.workspace = workspace

    async def turn(self, session: Session, text: str) -> None:
        self.sessions.start_turn(session, TurnRequest(text=text))
        await self.sessions.wait_idle(session.id)

    async def evict(self) -> None:
        """Unload every idle session (keep_idle is 2)."""
        for _ in range(3):
            await self.sessions.create()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    try:
        with ModelServer({"steps": [{"text": "unused"}]}) as server:
            with trio.fail_after(30):
                async with running_sessions(store, workspace, server, keep_idle=2) as sessions:
                    yield Rig(sessions, server, workspace)
    finally:
        store.close()


def texts(session: Session) -> list[tuple[str, str]]:
    return [
        (type(item).__name__, item.text)
        for item in session.items()
        if isinstance(item, UserMessage | AgentMessage)
    ]


def conversation(request: dict[str, object]) -> list[tuple[str, str]]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [(m["role"], m["content"]) for m in messages[1:]]  # pyright: ignore[reportUnknownVariableType]


async def three_turns(rig: Rig) -> Session:
    rig.server.set_script({"steps": [{"text": "a1"}, {"text": "a2"}, {"text": "a3"}]})
    source = await rig.sessions.create()
    for text in ("one", "two", "three"):
        await rig.turn(source, text)
    return source


# --- fork ------------------------------------------------------------------------------------


async def test_a_fork_holds_the_conversation_up_to_the_turn_and_goes_on_from_there(
    rig: Rig,
) -> None:
    source = await three_turns(rig)
    second = source.turns[1].id
    fork = await fork_session(rig.sessions, source.id, second, by="test")

    assert fork.id != source.id
    assert texts(fork) == [
        ("UserMessage", "one"),
        ("AgentMessage", "a1"),
        ("UserMessage", "two"),
        ("AgentMessage", "a2"),
    ]
    assert [t.id for t in fork.turns] == [t.id for t in source.turns[:2]]
    info = fork.info()
    assert info.forked_from == ForkOrigin(session_id=source.id, turn_id=second)
    assert (info.title, info.turn_count, info.state) == ("one (fork)", 2, "idle")
    # The source is as it was.
    assert len(source.turns) == 3

    # Attached from the beginning, the fork replays those turns, then its own title.
    watcher = Watcher()
    result, replay = fork.attach(watcher, "observer", None)
    assert result.snapshot is not None
    assert [len(t.items) for t in result.snapshot.turns] == [
        len(t.items) for t in source.snapshot().turns[:2]
    ]
    assert replay == []

    # Its model sees that conversation, and not the third turn.
    rig.server.set_script({"steps": [{"text": "b3"}]})
    await rig.turn(fork, "branch")
    assert conversation(rig.server.requests[-1]) == [
        ("user", "one"),
        ("assistant", "a1"),
        ("user", "two"),
        ("assistant", "a2"),
        ("user", "branch"),
    ]
    fork.detach(watcher)

    # Unloaded, the fork is listed with its origin, and reloads with the same items.
    items = fork.items()
    await rig.evict()
    assert rig.sessions.loaded(fork.id) is None
    listed = {s.id: s for s in await rig.sessions.list()}
    assert listed[fork.id].forked_from == ForkOrigin(session_id=source.id, turn_id=second)
    assert (listed[fork.id].turn_count, listed[fork.id].title) == (3, "one (fork)")
    assert listed[source.id].forked_from is None
    again = await rig.sessions.get(fork.id)
    assert again.items() == items
    assert again.info().forked_from == info.forked_from


async def test_a_fork_without_a_turn_keeps_every_turn_and_takes_its_own_title(
    rig: Rig,
) -> None:
    source = await three_turns(rig)
    fork = await fork_session(rig.sessions, source.id, None, title="  my\n branch  ")
    assert [t.id for t in fork.turns] == [t.id for t in source.turns]
    assert fork.title == "my branch"
    assert fork.info().forked_from == ForkOrigin(session_id=source.id, turn_id=source.turns[-1].id)
    # A fork of a fork names its own source.
    again = await fork_session(rig.sessions, fork.id, fork.turns[0].id)
    assert again.info().forked_from == ForkOrigin(session_id=fork.id, turn_id=fork.turns[0].id)
    assert again.title == "my branch (fork)"


PAUSE = {
    "tool_calls": [
        {"name": "run_command", "arguments": {"command": "echo hi", "description": "say hi"}}
    ]
}


async def test_a_fork_of_a_session_with_a_running_turn_keeps_only_the_completed_turns(
    rig: Rig,
) -> None:
    rig.server.set_script({"steps": [{"text": "a1"}, PAUSE, {"text": "done"}]})
    sessions = rig.sessions
    source = await sessions.create()
    await rig.turn(source, "one")
    watcher = Watcher()
    source.attach(watcher, "controller", None)
    sessions.start_turn(source, TurnRequest(text="two"))
    request = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(request, ApprovalRequested)
    running = source.running_turn_id
    assert running is not None

    fork = await fork_session(sessions, source.id, None)
    assert texts(fork) == [("UserMessage", "one"), ("AgentMessage", "a1")]
    assert fork.running_turn_id is None
    assert (fork.pending_approvals, fork.info().state) == ({}, "idle")
    assert fork.info().forked_from == ForkOrigin(session_id=source.id, turn_id=source.turns[0].id)

    # Naming the running turn is refused; so are a turn and a session that do not exist.
    for session_id, turn_id, code in [
        (source.id, running, ErrorCode.SESSION_BUSY),
        (source.id, "t_nope", ErrorCode.TURN_NOT_FOUND),
        ("s_nope", None, ErrorCode.SESSION_NOT_FOUND),
    ]:
        with pytest.raises(RpcError) as caught:
            await fork_session(sessions, session_id, turn_id)
        assert caught.value.code == code
    with pytest.raises(RpcError) as caught:
        await fork_session(sessions, source.id, None, title="x" * 201)
    assert caught.value.code == ErrorCode.INVALID_PARAMS

    # None of the refused forks left a session behind.
    assert len(await sessions.list()) == 2
    broker = await sessions.broker(source.id)
    broker.respond(request.approval.id, decision="deny", scope="once", by="test")
    await sessions.wait_idle(source.id)


LONG_REQUEST = "please look into the greeting; " + "here is some background. " * 80
SUMMARY = "## User requests\n- look into the greeting (open)"


async def test_a_compaction_summary_carries_over_into_the_fork(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "sure"}, {"text": SUMMARY}, {"text": "next"}]})
    source = await rig.sessions.create()
    await rig.turn(source, LONG_REQUEST)
    assert (await rig.sessions.compact(source)).compacted
    fork = await fork_session(rig.sessions, source.id, None)
    assert [i.summary for i in fork.items() if isinstance(i, Compaction)] == [SUMMARY]

    await rig.turn(fork, "go on")
    in_fork = conversation(rig.server.requests[-1])
    rig.server.set_script({"steps": [{"text": "next"}]})
    await rig.turn(source, "go on")
    assert in_fork == conversation(rig.server.requests[-1])
    assert any(SUMMARY in content for _, content in in_fork)
    assert not any(LONG_REQUEST in content for _, content in in_fork)

    # Forked at the turn before the compaction, it holds the whole conversation instead.
    before = await fork_session(rig.sessions, source.id, source.turns[0].id)
    assert [i for i in before.items() if isinstance(i, Compaction)] == []
    rig.server.set_script({"steps": [{"text": "next"}]})
    await rig.turn(before, "go on")
    assert conversation(rig.server.requests[-1])[0] == ("user", LONG_REQUEST)


async def test_a_fork_does_not_inherit_the_edit_guard_s_reads(rig: Rig) -> None:
    (rig.workspace / "notes.txt").write_text("old line\n")
    edit = {
        "tool_calls": [
            {
                "name": "edit_file",
                "arguments": {"path": "notes.txt", "old_string": "old", "new_string": "new"},
            }
        ]
    }
    rig.server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                {"text": "read it"},
                edit,
                {"text": "tried"},
            ]
        }
    )
    source = await rig.sessions.create()
    watcher = Watcher()
    source.attach(watcher, "controller", None)  # kept loaded: its reads stay in memory
    await rig.turn(source, "read notes")
    fork = await fork_session(rig.sessions, source.id, None)
    await rig.turn(fork, "edit it")
    (call,) = [i for i in fork.turns[-1].items.values() if isinstance(i, ToolCall)]
    assert call.status == "failed"
    assert "has not been read in this session" in call.output
    assert (rig.workspace / "notes.txt").read_text() == "old line\n"

    # The source's read still counts in the source.
    rig.server.set_script({"steps": [edit, {"text": "edited"}]})
    await rig.turn(source, "edit it")
    (call,) = [i for i in source.turns[-1].items.values() if isinstance(i, ToolCall)]
    assert call.status == "completed", call.output
    assert (rig.workspace / "notes.txt").read_text() == "new line\n"


# --- rename ----------------------------------------------------------------------------------


async def test_a_rename_is_an_event_every_client_sees_and_the_list_keeps(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "a1"}], "loop": True})
    session = await rig.sessions.create()
    await rig.turn(session, "fix the parser\nplease, it breaks on tabs")
    assert session.title == "fix the parser"
    watchers = [Watcher(), Watcher()]
    for watcher, role in zip(watchers, ("controller", "observer"), strict=True):
        session.attach(watcher, role, None)

    rename(session, "  Parser:\ttabs  ", by="alice")
    for watcher in watchers:
        assert watcher.events == [SessionRenamed(title="Parser: tabs", by="alice")]
    assert session.info().title == "Parser: tabs"

    # Nothing changes, nothing is sent.
    rename(session, "Parser: tabs", by="bob")
    assert len(watchers[0].events) == 1

    # Refused titles change nothing.
    for bad in ("x" * 201, "bell\x07"):
        with pytest.raises(RpcError) as caught:
            rename(session, bad, by="alice")
        assert caught.value.code == ErrorCode.INVALID_PARAMS
    assert session.title == "Parser: tabs"
    rename(session, "y" * 200, by="alice")  # the limit itself is fine
    rename(session, "Parser: tabs", by="alice")

    # A later turn keeps the given title; unloaded and listed, it is still there.
    await rig.turn(session, "and another thing")
    for watcher in watchers:
        session.detach(watcher)
    await rig.evict()
    assert rig.sessions.loaded(session.id) is None
    listed = {s.id: s for s in await rig.sessions.list()}
    assert listed[session.id].title == "Parser: tabs"

    # Empty: back to the automatic title, from the first message.
    again = await rig.sessions.get(session.id)
    rename(again, "   ", by="alice")
    assert again.title == "fix the parser"


async def test_a_session_renamed_before_its_first_turn_keeps_the_title(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "a1"}], "loop": True})
    session = await rig.sessions.create()
    rename(session, "", by="alice")  # nothing to go back to yet
    assert session.title == ""
    rename(session, "release prep", by="alice")
    await rig.turn(session, "bump the version")
    assert session.title == "release prep"


# --- the event log ---------------------------------------------------------------------------


async def test_the_event_log_reads_in_pages_and_round_trips(rig: Rig, tmp_path: Path) -> None:
    source = await three_turns(rig)
    first = await read_events(rig.sessions, SessionEventsParams(session_id=source.id, limit=5))
    assert first.more
    assert len(first.events) == 5
    records = list(first.events)
    while True:
        page = await read_events(
            rig.sessions,
            SessionEventsParams(session_id=source.id, after_seq=records[-1].seq, limit=5),
        )
        records += page.events
        if not page.more:
            break
    stored = await rig.sessions.store.load_events(source.id)
    assert [r.seq for r in records] == [seq for seq, _ in stored]
    assert [r.event for r in records] == [event_decoder.decode(body) for _, body in stored]
    assert first.session.id == source.id

    # One record a line, decoded by the protocol's own types, gives the same events.
    lines = [msgspec.json.encode(r) for r in records]
    decoder = msgspec.json.Decoder(EventRecord)
    assert [decoder.decode(line) for line in lines] == records

    with pytest.raises(RpcError) as caught:
        await read_events(rig.sessions, SessionEventsParams(session_id="s_nope"))
    assert caught.value.code == ErrorCode.SESSION_NOT_FOUND


class GatedImages(ImageStore):
    """An image store whose copy for a fork waits (in its worker thread) until the test lets
    it go, so the test can act on the source while a fork is under way."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.release = threading.Event()

    def copy_session(self, source_id: str, target_id: str, digests: Iterable[str]) -> None:
        self.entered.set()
        self.release.wait(10)
        super().copy_session(source_id, target_id, digests)


async def test_what_the_source_does_while_a_fork_copies_its_images_stays_out_of_the_fork(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    images = GatedImages(tmp_path / "images")
    script = {"steps": [{"text": "a1"}, {"text": "a2"}]}
    try:
        with trio.fail_after(30), ModelServer(script) as server:
            async with running_sessions(store, workspace, server, images=images) as sessions:
                source = await sessions.create()
                sessions.start_turn(source, TurnRequest(text="one"))
                await sessions.wait_idle(source.id)
                forks: list[Session] = []

                async def fork() -> None:
                    forks.append(await fork_session(sessions, source.id, None))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fork)
                    await trio.to_thread.run_sync(images.entered.wait, 10)
                    # A turn, then a deletion of the source, while the images are copied.
                    sessions.start_turn(source, TurnRequest(text="two"))
                    await sessions.wait_idle(source.id)
                    await sessions.delete(source.id)
                    images.release.set()
                (forked,) = forks
                assert texts(forked) == [("UserMessage", "one"), ("AgentMessage", "a1")]
                assert forked.info().turn_count == 1
                assert [t.status for t in forked.turns] == ["completed"]
    finally:
        store.close()
