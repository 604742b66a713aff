"""Undo: snapshots saved as tools write (through the real tools and a real SQLite store),
restoring a turn, conflicts, force, surviving a restart, and the files-changed summary."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tether.daemon.sessions.store import Store
from tether.daemon.sessions.undo import (
    NothingToUndo,
    TurnChanges,
    last_turn_with_changes,
    undo_turn,
)
from tether.daemon.tools.base import ReadVersions, ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.items import FileChange

REGISTRY = ToolRegistry(default_tools())


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "keep.txt").write_text("untouched\n")
    (root / "app.py").write_text("def main():\n    return 1\n")
    (root / "notes.md").write_text("one\ntwo\n")
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "state" / "tether.db")
    store.open()
    yield store
    store.close()


class Agent:
    """Runs tools as a session does: one ReadVersions for the session, one TurnChanges per turn."""

    def __init__(self, ws: Path, store: Store) -> None:
        self.ws = ws
        self.store = store
        self.versions = ReadVersions()
        self.turn: TurnChanges | None = None

    def start_turn(self, turn_id: str) -> TurnChanges:
        self.turn = TurnChanges(self.store, self.ws, "s1", turn_id)
        return self.turn

    async def do(self, tool: str, **args: object) -> str:
        assert self.turn is not None
        ctx = ToolContext(self.ws, versions=self.versions, changes=self.turn)
        params = REGISTRY.validate(tool, json.dumps(args))
        assert not isinstance(params, str), params
        with trio.fail_after(10):
            result = await REGISTRY.run(tool, params, ctx)
        assert result.status == "completed", result.output
        return result.output


async def make_turn(agent: Agent, turn_id: str = "t1") -> TurnChanges:
    changes = agent.start_turn(turn_id)
    await agent.do("read_file", path="app.py")
    await agent.do("edit_file", path="app.py", old_string="return 1", new_string="return 2")
    await agent.do("edit_file", path="app.py", old_string="return 2", new_string="return 3\n# x")
    await agent.do("write_file", path="pkg/new_module.py", content="VALUE = 1\n")
    return changes


async def test_undo_restores_edited_files_and_removes_created_ones(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    await make_turn(agent)
    assert (ws / "app.py").read_text() == "def main():\n    return 3\n# x\n"
    with trio.fail_after(10):
        assert await last_turn_with_changes(store, "s1") == "t1"
        result = await undo_turn(store, ws, "s1", "t1")
    assert result.applied
    assert result.turn_id == "t1"
    assert result.restored == ["app.py"]
    assert result.removed == ["pkg/new_module.py"]
    assert result.conflicts == []
    assert "commands" in result.note
    assert (ws / "app.py").read_text() == "def main():\n    return 1\n"
    assert not (ws / "pkg" / "new_module.py").exists()
    assert (ws / "keep.txt").read_text() == "untouched\n"


async def test_a_turn_cannot_be_undone_twice(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    await make_turn(agent)
    with trio.fail_after(10):
        await undo_turn(store, ws, "s1", "t1")
        with pytest.raises(NothingToUndo, match="already undone"):
            await undo_turn(store, ws, "s1", "t1")
        with pytest.raises(NothingToUndo, match="changed no files"):
            await undo_turn(store, ws, "s1", "t-unknown")
        assert await last_turn_with_changes(store, "s1") is None


async def test_files_changed_since_the_turn_are_conflicts(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    await make_turn(agent)
    (ws / "app.py").write_text("the user's version\n")
    with trio.fail_after(10):
        refused = await undo_turn(store, ws, "s1", "t1")
    assert not refused.applied
    assert refused.conflicts == ["app.py"]
    assert refused.restored == refused.removed == []
    assert "force" in refused.note
    # Nothing was touched, not even the file without a conflict.
    assert (ws / "app.py").read_text() == "the user's version\n"
    assert (ws / "pkg" / "new_module.py").exists()
    with trio.fail_after(10):
        forced = await undo_turn(store, ws, "s1", "t1", force=True)
    assert forced.applied
    assert forced.conflicts == ["app.py"]
    assert forced.restored == ["app.py"]
    assert forced.removed == ["pkg/new_module.py"]
    assert (ws / "app.py").read_text() == "def main():\n    return 1\n"


async def test_a_created_file_deleted_since_is_a_conflict(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    await make_turn(agent)
    (ws / "pkg" / "new_module.py").unlink()
    with trio.fail_after(10):
        result = await undo_turn(store, ws, "s1", "t1")
    assert not result.applied
    assert result.conflicts == ["pkg/new_module.py"]


async def test_snapshots_survive_a_restart(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "state" / "tether.db"
    first = Store(path)
    first.open()
    try:
        await make_turn(Agent(ws, first))
    finally:
        first.close()  # writes everything queued, like a daemon stopping
    second = Store(path)
    second.open()
    try:
        with trio.fail_after(10):
            assert await last_turn_with_changes(second, "s1") == "t1"
            result = await undo_turn(second, ws, "s1", "t1")
    finally:
        second.close()
    assert result.applied
    assert (ws / "app.py").read_text() == "def main():\n    return 1\n"
    assert not (ws / "pkg" / "new_module.py").exists()


async def test_repeated_undo_walks_back_through_turns(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    agent.start_turn("t1")
    await agent.do("read_file", path="notes.md")
    await agent.do("edit_file", path="notes.md", old_string="one", new_string="ONE")
    agent.start_turn("t2")
    await agent.do("edit_file", path="notes.md", old_string="two", new_string="TWO")
    with trio.fail_after(10):
        assert await last_turn_with_changes(store, "s1") == "t2"
        await undo_turn(store, ws, "s1", "t2")
        assert (ws / "notes.md").read_text() == "ONE\ntwo\n"
        assert await last_turn_with_changes(store, "s1") == "t1"
        await undo_turn(store, ws, "s1", "t1")
        assert (ws / "notes.md").read_text() == "one\ntwo\n"
        assert await last_turn_with_changes(store, "s1") is None
        assert await last_turn_with_changes(store, "other-session") is None


async def test_undoing_an_older_turn_sees_later_changes_as_conflicts(
    ws: Path, store: Store
) -> None:
    agent = Agent(ws, store)
    agent.start_turn("t1")
    await agent.do("read_file", path="notes.md")
    await agent.do("edit_file", path="notes.md", old_string="one", new_string="ONE")
    agent.start_turn("t2")
    await agent.do("edit_file", path="notes.md", old_string="two", new_string="TWO")
    with trio.fail_after(10):
        result = await undo_turn(store, ws, "s1", "t1")
    assert not result.applied
    assert result.conflicts == ["notes.md"]


async def test_files_changed_summary(ws: Path, store: Store) -> None:
    agent = Agent(ws, store)
    changes = await make_turn(agent)
    await agent.do("read_file", path="notes.md")
    await agent.do("edit_file", path="notes.md", old_string="one", new_string="uno")
    await agent.do("edit_file", path="notes.md", old_string="uno", new_string="one")
    assert changes.files_changed() == [
        FileChange(path="app.py", added=2, removed=1),
        FileChange(path="pkg/new_module.py", added=1, created=True),
    ]


async def test_deletions_are_recorded_and_undone(ws: Path, store: Store) -> None:
    changes = TurnChanges(store, ws, "s1", "t9")
    target = (ws / "keep.txt").resolve()
    with trio.fail_after(10):
        await changes.before_write(target)
        before = target.read_bytes()
        target.unlink()
        changes.after_write(target, before, None)
        assert changes.files_changed() == [FileChange(path="keep.txt", removed=1, deleted=True)]
        result = await undo_turn(store, ws, "s1", "t9")
    assert result.restored == ["keep.txt"]
    assert (ws / "keep.txt").read_text() == "untouched\n"
