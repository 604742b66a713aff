"""Worktree sessions in the real daemon with real git: two sessions edit the same file apart
from the workspace's checkout, are merged one after the other (the second conflicts and
changes nothing), and a worktree session keeps working in its worktree after the daemon is
killed and started again, or finds its folder gone when it was removed by hand. A fork of a
worktree session works in a worktree of its own, and two merges started at once take
turns."""

import shutil
import threading
from pathlib import Path

import pytest

from tests.git_repo import git, hostile, make_repo
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    start_daemon,
    start_turn,
)
from tether.clients.core.call_error import CallError
from tether.clients.core.rpc import Client
from tether.protocol.errors import ErrorCode
from tether.protocol.methods import (
    SESSION_CREATE,
    SESSION_DELETE,
    SESSION_DIFF,
    SESSION_FORK,
    SESSION_MERGE,
    WORKTREE_LIST,
    WORKTREE_PRUNE,
    SessionCreateParams,
    SessionDeleteParams,
    SessionForkParams,
    SessionMergeParams,
    SessionRef,
)
from tether.protocol.session import SessionInfo
from tether.testing import ModelServer


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", "greeting = 'hello'\n")


def worktree_session(client: Client, title: str) -> tuple[SessionInfo, Path]:
    """A new session titled `title` in a worktree of its own, and the worktree's root."""
    created = client.call(
        SESSION_CREATE, SessionCreateParams(title=title, isolation="worktree")
    ).session
    assert created.worktree is not None
    return created, Path(created.worktree.root)


def edit_script(new: str, old: str = "hello") -> dict[str, object]:
    edit = {
        "name": "edit_file",
        "arguments": {"path": "app.py", "old_string": old, "new_string": new},
    }
    read = {"name": "read_file", "arguments": {"path": "app.py"}}
    return {"steps": [{"tool_calls": [read]}, {"tool_calls": [edit]}, {"text": "done"}]}


def test_two_worktree_sessions_edit_apart_and_merge_one_after_the_other(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            ids: list[str] = []
            for title, new in (("first", "hi"), ("second", "howdy")):
                created, root = worktree_session(client, title)
                assert repo not in root.parents
                assert created.worktree is not None  # for the type checker: the helper checked
                assert created.worktree.branch == f"tether/{title}-{created.id}"
                attach(client, created.id)
                model_server.set_script(edit_script(new))
                start_turn(client, created.id, "edit app.py")
                collect_until_turn_end(client, created.id)
                assert (root / "app.py").read_text() == f"greeting = '{new}'\n"
                ids.append(created.id)
            assert (repo / "app.py").read_text() == "greeting = 'hello'\n"
            assert git(repo, "status", "--porcelain") == ""

            diff = client.call(SESSION_DIFF, SessionRef(session_id=ids[0]))
            assert [(f.path, f.added, f.removed) for f in diff.files] == [("app.py", 1, 1)]
            assert "+greeting = 'hi'" in diff.patch

            listed = {w.session_id: w for w in client.call(WORKTREE_LIST).worktrees}
            assert not listed[ids[0]].merged

            merged = client.call(SESSION_MERGE, SessionMergeParams(session_id=ids[0]))
            assert merged.files == ["app.py"]
            assert (repo / "app.py").read_text() == "greeting = 'hi'\n"
            head = git(repo, "rev-parse", "HEAD").strip()

            with pytest.raises(CallError) as conflict:
                client.call(SESSION_MERGE, SessionMergeParams(session_id=ids[1]))
            assert conflict.value.code == ErrorCode.MERGE_CONFLICT
            assert "app.py" in conflict.value.message
            assert (repo / "app.py").read_text() == "greeting = 'hi'\n"
            assert git(repo, "status", "--porcelain") == ""
            assert git(repo, "rev-parse", "HEAD").strip() == head

            listed = {w.session_id: w for w in client.call(WORKTREE_LIST).worktrees}
            assert listed[ids[0]].merged
            assert not listed[ids[1]].merged

            with pytest.raises(CallError) as unmerged:
                client.call(SESSION_DELETE, SessionDeleteParams(session_id=ids[1]))
            assert unmerged.value.code == ErrorCode.WORKTREE_UNMERGED
            assert Path(listed[ids[1]].worktree.root).is_dir()

            pruned = client.call(WORKTREE_PRUNE)
            assert pruned.removed == [ids[0]]
            assert not Path(listed[ids[0]].worktree.root).exists()

            client.call(SESSION_DELETE, SessionDeleteParams(session_id=ids[1], force=True))
            assert not Path(listed[ids[1]].worktree.root).exists()
            assert f"tether/second-{ids[1]}" not in git(repo, "branch")
    finally:
        assert daemon.stop() == 0


def test_a_worktree_session_keeps_its_worktree_after_the_daemon_is_killed(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            created, root = worktree_session(client, "lasting")
    finally:
        daemon.kill()
    model_server.set_script(edit_script("hi"))
    restarted = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with restarted.client() as client:
            attach(client, created.id)
            start_turn(client, created.id, "edit app.py")
            collect_until_turn_end(client, created.id)
    finally:
        assert restarted.stop() == 0
    assert (root / "app.py").read_text() == "greeting = 'hi'\n"
    assert (repo / "app.py").read_text() == "greeting = 'hello'\n"


def test_a_workspace_that_is_not_a_repository_is_told_so(
    home: Home, tmp_path: Path, model_server: ModelServer
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    daemon = start_daemon(home, plain, "--idle-timeout", "0")
    try:
        with daemon.client() as client, pytest.raises(CallError) as refused:
            client.call(SESSION_CREATE, SessionCreateParams(isolation="worktree"))
    finally:
        assert daemon.stop() == 0
    assert refused.value.code == ErrorCode.WORKTREE_FAILED
    assert "not in a git repository" in refused.value.message


def test_a_worktree_removed_by_hand_is_found_missing_and_forgotten_by_git(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            created, root = worktree_session(client, "gone")
            assert str(root) in git(repo, "worktree", "list")
            shutil.rmtree(root)
            [entry] = client.call(WORKTREE_LIST).worktrees
            assert entry.missing
            assert str(root) not in git(repo, "worktree", "list")
            attach(client, created.id)
            with pytest.raises(CallError) as refused:
                start_turn(client, created.id, "edit app.py")
            assert refused.value.code == ErrorCode.WORKTREE_FAILED
            assert "is gone" in refused.value.message
    finally:
        assert daemon.stop() == 0


def test_a_hostile_repository_runs_nothing_through_the_daemon(
    home: Home, repo: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    """Hooks, an fsmonitor, an ssh command and a pager that leave marker files: none runs
    while the daemon makes, diffs, merges, lists, prunes and deletes worktree sessions."""
    marker = tmp_path / "ran"
    marker.mkdir()
    hostile(repo, marker)
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            ids: list[str] = []
            for title in ("merged", "dropped"):
                created, root = worktree_session(client, title)
                (root / f"{title}.py").write_text("x = 1\n")
                ids.append(created.id)
            client.call(SESSION_DIFF, SessionRef(session_id=ids[0]))
            client.call(SESSION_MERGE, SessionMergeParams(session_id=ids[0]))
            client.call(WORKTREE_LIST)
            assert client.call(WORKTREE_PRUNE).removed == [ids[0]]
            client.call(SESSION_DELETE, SessionDeleteParams(session_id=ids[1], force=True))
    finally:
        assert daemon.stop() == 0
    assert (repo / "merged.py").exists()
    assert sorted(p.name for p in marker.iterdir()) == []


def test_a_fork_of_a_worktree_session_works_in_a_worktree_of_its_own(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    """The parent edits app.py without committing; its fork starts from that edit in a
    worktree of its own, edits further without touching the parent's worktree or the main
    checkout, and merging the fork brings its changes."""
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            parent, parent_root = worktree_session(client, "parent")
            attach(client, parent.id)
            model_server.set_script(edit_script("hi"))
            start_turn(client, parent.id, "edit app.py")
            collect_until_turn_end(client, parent.id)
            assert (parent_root / "app.py").read_text() == "greeting = 'hi'\n"
            parent_status = git(parent_root, "status", "--porcelain")
            assert parent_status.strip() == "M app.py"

            forked = client.call(SESSION_FORK, SessionForkParams(session_id=parent.id))
            fork = forked.session
            assert fork.worktree is not None
            fork_root = Path(fork.worktree.root)
            assert fork_root != parent_root
            assert repo not in fork_root.parents
            assert fork.worktree.branch == f"tether/parent-fork-{fork.id}"
            assert parent.worktree is not None  # for the type checker: the helper checked
            assert fork.worktree.base == parent.worktree.base
            assert "worktree of its own" in forked.note
            assert (fork_root / "app.py").read_text() == "greeting = 'hi'\n"
            assert git(parent_root, "status", "--porcelain") == parent_status

            attach(client, fork.id)
            model_server.set_script(edit_script("hey", old="hi"))
            start_turn(client, fork.id, "edit app.py again")
            collect_until_turn_end(client, fork.id)
            assert (fork_root / "app.py").read_text() == "greeting = 'hey'\n"
            assert (parent_root / "app.py").read_text() == "greeting = 'hi'\n"
            assert (repo / "app.py").read_text() == "greeting = 'hello'\n"

            merged = client.call(SESSION_MERGE, SessionMergeParams(session_id=fork.id))
            assert merged.files == ["app.py"]
            assert (repo / "app.py").read_text() == "greeting = 'hey'\n"
            assert git(repo, "status", "--porcelain") == ""
            assert (parent_root / "app.py").read_text() == "greeting = 'hi'\n"
    finally:
        assert daemon.stop() == 0


def merge_at_once(daemon: DaemonProcess, session_ids: list[str]) -> list[CallError | None]:
    """`session/merge` of each session from its own client and thread, released together;
    what each call raised (None: it succeeded)."""
    released = threading.Barrier(len(session_ids))
    outcomes: list[CallError | None] = [None] * len(session_ids)

    def merge(index: int) -> None:
        with daemon.client(f"merger {index}") as client:
            released.wait()
            try:
                client.call(SESSION_MERGE, SessionMergeParams(session_id=session_ids[index]))
            except CallError as exc:
                outcomes[index] = exc

    threads = [threading.Thread(target=merge, args=(i,)) for i in range(len(session_ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def worktree_sessions(daemon: DaemonProcess, files: list[tuple[str, str]]) -> list[str]:
    """A worktree session per (file, content), each having written its file."""
    ids: list[str] = []
    with daemon.client() as client:
        for index, (name, content) in enumerate(files):
            created, root = worktree_session(client, f"s{index}")
            (root / name).write_text(content)
            ids.append(created.id)
    return ids


def test_two_merges_at_once_of_different_files_both_land(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        ids = worktree_sessions(daemon, [("a.py", "a = 1\n"), ("b.py", "b = 1\n")])
        assert merge_at_once(daemon, ids) == [None, None]
    finally:
        assert daemon.stop() == 0
    assert (repo / "a.py").read_text() == "a = 1\n"
    assert (repo / "b.py").read_text() == "b = 1\n"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-list", "--count", "--merges", "HEAD").strip() == "2"


def test_two_merges_at_once_of_the_same_file_one_lands_one_conflicts(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    daemon = start_daemon(home, repo, "--idle-timeout", "0")
    try:
        ids = worktree_sessions(
            daemon, [("app.py", "greeting = 'hi'\n"), ("app.py", "greeting = 'howdy'\n")]
        )
        outcomes = merge_at_once(daemon, ids)
    finally:
        assert daemon.stop() == 0
    failed = [exc for exc in outcomes if exc is not None]
    assert len(failed) == 1
    assert failed[0].code == ErrorCode.MERGE_CONFLICT
    winner = outcomes.index(None)
    assert (repo / "app.py").read_text() == ["greeting = 'hi'\n", "greeting = 'howdy'\n"][winner]
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-list", "--count", "--merges", "HEAD").strip() == "1"
