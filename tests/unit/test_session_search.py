"""Searching sessions: the FTS5 index a schema migration adds and fills from the sessions
already stored, kept current by every event written, and the queries people type."""

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import trio

from tests.inprocess import running_sessions
from tether.daemon.sessions.fork import fork_session
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.schema import SCHEMA_VERSION, fts5_missing
from tether.daemon.sessions.search import literal_query, search
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import AnyEvent, ItemCompleted, TurnCompleted, TurnStarted
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.methods import SessionSearchParams, SnippetPart
from tether.testing import ModelServer

# The schema as tether 2 wrote it (what an existing data directory holds).
V2_SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    turn_count INTEGER NOT NULL DEFAULT 0, running_turn TEXT,
    last_status TEXT, model TEXT NOT NULL DEFAULT '', permission_mode TEXT);
CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
CREATE TABLE snapshots (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL, path TEXT NOT NULL, content BLOB, size INTEGER, digest TEXT,
    after_digest TEXT, created_at REAL NOT NULL, undone INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, turn_id, path));
CREATE INDEX snapshots_by_session ON snapshots (session_id, id);
PRAGMA user_version = 2;
"""

_encode = msgspec.json.Encoder().encode


def old_turn(
    turn_id: str, prompt: str, *items: UserMessage | AgentMessage | ToolCall
) -> list[AnyEvent]:
    return [
        TurnStarted(turn_id=turn_id, started_at=1.0),
        ItemCompleted(turn_id=turn_id, item=UserMessage(id=f"{turn_id}_u", text=prompt)),
        *(ItemCompleted(turn_id=turn_id, item=item) for item in items),
        TurnCompleted(turn_id=turn_id, status="completed", ended_at=2.0),
    ]


def version_2_database(path: Path) -> None:
    """Two sessions as tether 2 stored them, with prompts, answers and tool output."""
    sessions: dict[str, list[AnyEvent]] = {
        "s_old": old_turn(
            "t_1",
            "Why does the tokenizer choke on tabs?",
            ToolCall(id="c1", call_id="c1", tool="grep", arguments="{}", output="zebra output"),
            AgentMessage(id="a0", text="half of a retried answer", superseded=True),
            AgentMessage(id="a1", text="The lexer treats a tab as an identifier character."),
            AgentMessage(id="a2", text="a subagent's own words", parent_item_id="c1"),
        ),
        "s_other": old_turn("t_2", "Rename the Café widget", AgentMessage(id="a3", text="Done.")),
    }
    conn = sqlite3.connect(path)
    conn.executescript(V2_SCHEMA)
    for number, (session_id, events) in enumerate(sessions.items()):
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at, turn_count)"
            " VALUES (?, ?, ?, ?, 1)",
            (session_id, f"title of {session_id}", 1.0, 2.0 + number),
        )
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?)",
            [(session_id, seq, _encode(e)) for seq, e in enumerate(events, 1)],
        )
    conn.execute("INSERT INTO events VALUES ('s_old', 99, x'0102')")  # not JSON: skipped
    conn.commit()
    conn.close()


def query(text: str, **options: object) -> SessionSearchParams:
    return msgspec.convert({"query": text, **options}, SessionSearchParams)


async def test_a_version_2_store_is_migrated_and_its_old_sessions_are_searchable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.sqlite3"
    version_2_database(path)
    store = Store(path)
    store.open()
    try:
        with trio.fail_after(10):
            (hit,) = (await search(store, query("tokenizer tabs"))).hits
            assert (hit.session_id, hit.turn_id, hit.item_id, hit.kind) == (
                "s_old",
                "t_1",
                "t_1_u",
                "prompt",
            )
            assert hit.title == "title of s_old"
            assert hit.snippet == "Why does the tokenizer choke on tabs?"
            assert [p for p in hit.parts if p.match] == [
                SnippetPart(text="tokenizer", match=True),
                SnippetPart(text="tabs", match=True),
            ]
            (answer,) = (await search(store, query("identifier"))).hits
            assert (answer.item_id, answer.kind) == ("a1", "answer")
            # Diacritics and case folded.
            (cafe,) = (await search(store, query("cafe WIDGET"))).hits
            assert cafe.session_id == "s_other"
            # Not indexed: tool output, superseded text, a subagent's messages.
            for unindexed in ("zebra", "retried", "subagent"):
                assert (await search(store, query(unindexed))).hits == []
            rows = await store.list_sessions()
            assert {r.id: r.forked_from for r in rows} == {"s_old": None, "s_other": None}
            version = await store.call(lambda c: c.execute("PRAGMA user_version").fetchone())
            assert version[0] == SCHEMA_VERSION == 4
    finally:
        store.close()


class Rig:
    def __init__(self, sessions: Sessions, server: ModelServer, store: Store) -> None:
        self.sessions = sessions
        self.server = server
        self.store = store


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a walrus lives in this file\n")
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    try:
        with ModelServer({"steps": [{"text": "unused"}]}) as server:
            with trio.fail_after(30):
                async with running_sessions(store, workspace, server, keep_idle=2) as sessions:
                    yield Rig(sessions, server, store)
    finally:
        store.close()


async def test_a_turn_s_prompt_and_answer_are_searchable_as_soon_as_they_complete(
    rig: Rig,
) -> None:
    rig.server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                {"text": "The notes mention a marine mammal."},
            ]
        }
    )
    session = await rig.sessions.create()
    rig.sessions.start_turn(session, TurnRequest(text="what do the notes say?"))
    await rig.sessions.wait_idle(session.id)
    turn_id = session.turns[0].id
    hits = (await search(rig.store, query("notes"))).hits
    assert {(h.kind, h.session_id, h.turn_id) for h in hits} == {
        ("prompt", session.id, turn_id),
        ("answer", session.id, turn_id),
    }
    assert (await search(rig.store, query("walrus"))).hits == []  # the file, read by a tool

    # A fork's copies are found under the fork; a deleted session is found no more.
    fork = await fork_session(rig.sessions, session.id, None)
    hits = (await search(rig.store, query("marine mammal"))).hits
    assert sorted(h.session_id for h in hits) == sorted([session.id, fork.id])
    only = (await search(rig.store, query("mammal", sessionId=fork.id))).hits
    assert [h.session_id for h in only] == [fork.id]
    await rig.sessions.delete(session.id)
    assert [h.session_id for h in (await search(rig.store, query("mammal"))).hits] == [fork.id]


async def test_hits_come_best_first_within_the_limit(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "ok"}], "loop": True})
    session = await rig.sessions.create()
    for text in ("parser parser parser bug", "a parser bug", "unrelated words"):
        rig.sessions.start_turn(session, TurnRequest(text=text))
        await rig.sessions.wait_idle(session.id)
    result = await search(rig.store, query("parser"))
    assert [h.snippet for h in result.hits] == ["parser parser parser bug", "a parser bug"]
    assert result.hits[0].rank < result.hits[1].rank
    assert len((await search(rig.store, query("parser", limit=1))).hits) == 1
    assert len((await search(rig.store, query("ok", limit=10_000))).hits) == 3


NASTY = [
    'he said "hi',
    "NEAR(",
    "foo AND",
    "OR",
    "-x*",
    "col:umn",
    "^start",
    "a) OR (b",
    "back\\slash",
    "don't",
    "'it'\"s\"",
    "NOT NOT",
    "{a b}",
    "x + y",
]


@pytest.mark.parametrize("text", NASTY)
async def test_what_a_person_types_is_never_a_query_error(rig: Rig, text: str) -> None:
    rig.server.set_script({"steps": [{"text": "ok"}], "loop": True})
    session = await rig.sessions.create()
    rig.sessions.start_turn(session, TurnRequest(text=f"before {text} after"))
    await rig.sessions.wait_idle(session.id)
    result = await search(rig.store, query(text))
    assert [h.session_id for h in result.hits] == [session.id]


async def test_bad_queries_get_typed_errors(rig: Rig) -> None:
    for text, options, code in [
        ("", {}, ErrorCode.INVALID_PARAMS),
        ("  ?! ", {}, ErrorCode.INVALID_PARAMS),
        ("NEAR(", {"syntax": True}, ErrorCode.SEARCH_QUERY_INVALID),
        ('"unclosed', {"syntax": True}, ErrorCode.SEARCH_QUERY_INVALID),
        ("nosuchcolumn: x", {"syntax": True}, ErrorCode.SEARCH_QUERY_INVALID),
    ]:
        with pytest.raises(RpcError) as caught:
            await search(rig.store, query(text, **options))
        assert caught.value.code == code, text
    # The store goes on.
    assert (await search(rig.store, query("a OR b", syntax=True))).hits == []


def test_a_literal_query_quotes_every_word() -> None:
    assert literal_query('say "hi" NEAR(x) ?') == '"say" """hi""" "NEAR(x)"'
    assert literal_query(" \t ") == ""


def test_a_python_without_fts5_is_told_what_to_do(tmp_path: Path) -> None:
    error = fts5_missing(tmp_path / "db", "3.0.0")
    assert "built without FTS5" in str(error)
    assert "3.0.0" in str(error)
    assert str(tmp_path / "db") in str(error)
