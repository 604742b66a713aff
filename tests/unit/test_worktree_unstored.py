"""A worktree no stored session owns is never left behind: when a worktree session (or a
fork of one) cannot be written to the store, its new worktree and branch are removed and
the caller is told why."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.git_repo import git, make_repo
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.fork import fork_session
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.store import Store
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.errors import ErrorCode, RpcError


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[Sessions]:
    workspace = make_repo(tmp_path / "project", "print('main')\n")
    store = Store(tmp_path / "data" / "tether.sqlite3")
    store.open()
    # No turn runs here: the model is never called.
    model = OpenAIChatClient(base_url="http://127.0.0.1:9/v1", model="unused")
    sessions = Sessions(
        store=store, workspace=workspace, model=model, tools=ToolRegistry(default_tools())
    )
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(sessions.serve)
                yield sessions
                nursery.cancel_scope.cancel()
    finally:
        await model.aclose()
        store.close()


def worktree_folders(sessions: Sessions) -> list[str]:
    folder = sessions.store.path.parent / "worktrees"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def tether_branches(workspace: Path) -> list[str]:
    return git(workspace, "branch", "--list", "tether/*", "--format=%(refname:short)").split()


async def read_only(store: Store, on: bool) -> None:
    await store.call(lambda c: c.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}"))


async def test_a_worktree_session_that_cannot_be_stored_leaves_no_worktree(
    sessions: Sessions,
) -> None:
    await read_only(sessions.store, True)
    with pytest.raises(RpcError) as caught:
        await sessions.create("fix the bug", isolation="worktree")
    assert caught.value.code == ErrorCode.WORKTREE_FAILED
    assert "could not be saved" in caught.value.message
    assert "its worktree was removed" in caught.value.message

    assert worktree_folders(sessions) == []
    assert tether_branches(sessions.workspace) == []
    assert len(git(sessions.workspace, "worktree", "list").splitlines()) == 1
    await read_only(sessions.store, False)
    assert await sessions.store.list_sessions() == []

    # The store writable again, the same request makes a worktree session as usual.
    made = await sessions.create("fix the bug", isolation="worktree")
    assert worktree_folders(sessions) == [made.id]
    assert [row.id for row in await sessions.store.list_sessions()] == [made.id]


async def test_a_fork_that_cannot_be_stored_removes_its_worktree_and_keeps_the_parents(
    sessions: Sessions,
) -> None:
    parent = await sessions.create("fix the bug", isolation="worktree")
    assert parent.worktree is not None
    parent_branch = parent.worktree.branch
    await read_only(sessions.store, True)
    with pytest.raises(RpcError) as caught:
        await fork_session(sessions, parent.id, None)
    assert caught.value.code == ErrorCode.WORKTREE_FAILED

    assert worktree_folders(sessions) == [parent.id]
    assert tether_branches(sessions.workspace) == [parent_branch]
    await read_only(sessions.store, False)
    assert [row.id for row in await sessions.store.list_sessions()] == [parent.id]
