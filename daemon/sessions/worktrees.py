"""Worktree sessions as the protocol sees them: made at `session/create`, compared and merged
(`session/diff`, `session/merge`), listed and pruned (`worktree/list`, `worktree/prune`), and
guarded at `session/delete`. git runs in worker threads (`tether.daemon.worktrees`); what it
refuses becomes WORKTREE_FAILED, a conflict MERGE_CONFLICT with its files.

A session's worktree lives in `worktrees/<session id>` beside the workspace's database, so it
is the user's data, never a folder inside the repository the agent could be told to read as
the workspace's own.
"""

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import trio

from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import StoreClosed, StoreError
from tether.daemon.worktrees import worktree as git_worktree
from tether.daemon.worktrees.git import GitError
from tether.protocol.error_data import MergeConflicted
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import (
    ChangedFile,
    SessionDiffResult,
    SessionMergeResult,
    WorktreeEntry,
)
from tether.protocol.session import SessionInfo, WorktreeInfo


def _failed(exc: GitError) -> RpcError:
    return RpcError(ErrorCode.WORKTREE_FAILED, str(exc))


def _tree(info: WorktreeInfo) -> git_worktree.Worktree:
    return git_worktree.Worktree(root=Path(info.root), branch=info.branch, base=info.base)


def _worktree_of(session: Session) -> WorktreeInfo:
    if session.worktree is None:
        raise RpcError(
            ErrorCode.WORKTREE_FAILED,
            f"session {session.id} works in the workspace itself, not in a worktree",
        )
    if not Path(session.worktree.root).is_dir():
        raise RpcError(
            ErrorCode.WORKTREE_FAILED,
            f"the worktree of session {session.id} ({session.worktree.root}) is gone",
        )
    return session.worktree


async def make_worktree(
    workspace: Path, data_folder: Path, session_id: str, title: str, start: str
) -> WorktreeInfo:
    """A new worktree for the session `session_id`, in `data_folder/worktrees`."""
    folder = data_folder / "worktrees" / session_id
    branch = git_worktree.branch_name(title, session_id)
    try:
        made = await trio.to_thread.run_sync(git_worktree.create, workspace, folder, branch, start)
    except GitError as exc:
        raise _failed(exc) from exc
    return WorktreeInfo(root=str(made.root), branch=made.branch, base=made.base)


async def fork_worktree(
    workspace: Path, data_folder: Path, session_id: str, title: str, parent: WorktreeInfo
) -> WorktreeInfo:
    """A new worktree for the fork `session_id`, in `data_folder/worktrees`, starting from
    the parent's worktree as it is now, uncommitted changes included."""
    folder = data_folder / "worktrees" / session_id
    branch = git_worktree.branch_name(title, session_id)
    try:
        made = await trio.to_thread.run_sync(
            git_worktree.fork, workspace, _tree(parent), folder, branch
        )
    except GitError as exc:
        raise _failed(exc) from exc
    return WorktreeInfo(root=str(made.root), branch=made.branch, base=made.base)


async def session_changes(session: Session) -> SessionDiffResult:
    tree = _tree(_worktree_of(session))
    try:
        found = await trio.to_thread.run_sync(git_worktree.changes, tree)
    except GitError as exc:
        raise _failed(exc) from exc
    return SessionDiffResult(
        patch=found.patch,
        files=[
            ChangedFile(path=f.path, added=f.added, removed=f.removed, binary=f.binary)
            for f in found.files
        ],
    )


async def merge_session(workspace: Path, session: Session, *, squash: bool) -> SessionMergeResult:
    """Bring the session's changes into the workspace's current branch (see
    `tether.daemon.worktrees.worktree.merge`). The caller makes sure no turn runs."""
    tree = _tree(_worktree_of(session))
    title = session.title or session.id

    def run() -> git_worktree.MergeResult:
        return git_worktree.merge(workspace, tree, title=title, squash=squash)

    try:
        done = await trio.to_thread.run_sync(run)
    except git_worktree.MergeConflict as exc:
        raise RpcError(
            ErrorCode.MERGE_CONFLICT, str(exc), MergeConflicted(files=exc.files)
        ) from exc
    except GitError as exc:
        raise _failed(exc) from exc
    return SessionMergeResult(commit=done.commit, files=done.files)


def _entry(workspace: Path, info: SessionInfo) -> WorktreeEntry:
    assert info.worktree is not None
    tree = _tree(info.worktree)
    missing = not tree.root.is_dir()
    merged = False
    if not missing:
        try:
            merged = git_worktree.is_merged(workspace, tree)
        except GitError:
            merged = False
    return WorktreeEntry(
        session_id=info.id,
        title=info.title,
        worktree=info.worktree,
        age_seconds=round(git_worktree.age_seconds(tree), 1),
        merged=merged,
        missing=missing,
    )


async def worktree_entries(workspace: Path, sessions: list[SessionInfo]) -> list[WorktreeEntry]:
    """The worktrees of `sessions` (those that have one); git forgets the folders removed by
    hand on the way."""

    def read() -> list[WorktreeEntry]:
        found = [_entry(workspace, info) for info in sessions if info.worktree is not None]
        if any(entry.missing for entry in found):
            git_worktree.prune_missing(workspace)
        return found

    try:
        return await trio.to_thread.run_sync(read)
    except GitError as exc:
        raise _failed(exc) from exc


@asynccontextmanager
async def removed_unless_stored(workspace: Path, info: WorktreeInfo) -> AsyncGenerator[None]:
    """Remove the new worktree `info` when the block that stores its session fails or is
    cancelled: a worktree that no stored session owns is never left behind. A store that
    failed to write is WORKTREE_FAILED, saying so."""
    try:
        yield
    except BaseException as exc:
        # Shielded: a cancelled create still cleans up. A failure to remove is not raised:
        # the first failure is the one to report.
        with trio.CancelScope(shield=True), suppress(RpcError):
            await remove_worktree(workspace, info)
        if isinstance(exc, StoreError | StoreClosed):
            raise RpcError(
                ErrorCode.WORKTREE_FAILED,
                f"the session could not be saved ({exc}); its worktree was removed",
            ) from exc
        raise


async def remove_worktree(workspace: Path, info: WorktreeInfo) -> None:
    try:
        await trio.to_thread.run_sync(git_worktree.remove, workspace, _tree(info))
    except GitError as exc:
        raise _failed(exc) from exc


async def check_merged(workspace: Path, session_id: str, info: WorktreeInfo) -> None:
    """WORKTREE_UNMERGED when the worktree holds changes not merged yet."""
    entry = await trio.to_thread.run_sync(
        _entry, workspace, SessionInfo(id=session_id, created_at=0, updated_at=0, worktree=info)
    )
    if not entry.missing and not entry.merged:
        raise RpcError(
            ErrorCode.WORKTREE_UNMERGED,
            f"the worktree of session {session_id} holds changes that are not merged"
            f" (branch {info.branch}); merge them first, or delete with force to lose them",
        )
