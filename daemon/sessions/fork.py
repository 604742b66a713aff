"""Forking a session (`session/fork`): a new session whose event log is a copy of the
source's up to a turn.

Rules:
- The fork keeps the source's events from the first up to the start of the first turn it
  leaves out: the turn after `turn_id`, or the running turn, whose events a fork never holds.
  Without `turn_id` it keeps every completed turn (and what the session did after the last).
- The cut is decided from the source in memory and the copy is queued on the store with no
  await in between, so the copy holds exactly the events emitted before it (the store runs
  calls in order, behind the writes queued before them).
- The copied events keep their seqs and item and turn ids; the fork, loaded from them in a
  new epoch, rebuilds its conversation (compaction summaries included) as a reloaded session
  does. Its title (`session_renamed`) is its first event of its own.
- The images the copied messages and tool results carry are the fork's too (linked in the
  image store once the copy is queued, so deleting either session leaves the other's).
- A fork of a worktree session gets a worktree of its own, on a new `tether/...` branch
  starting from the source's worktree as it is now (uncommitted changes included; the
  source's branch, index and files are left as they are), so the files its copied history
  speaks of are there. It keeps the source's base commit.
- Not copied: the workspace's files (a fork of a session working in the workspace works on
  them as they are now), undo snapshots
  (the copied turns cannot be undone from the fork), the edit guard's read versions (the
  agent reads a file again before editing it): none of them is part of the event log.
"""

import re
import time
from contextlib import AsyncExitStack

import trio

from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session, TurnState, new_id
from tether.daemon.sessions.titles import clean_title
from tether.daemon.sessions.worktrees import fork_worktree, removed_unless_stored
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import SessionRenamed
from tether.protocol.items import ToolCall, UserMessage

FILES_NOT_COPIED = (
    "Files were not copied: the fork works on the workspace as it is now, and the turns it"
    " copied cannot be undone from it."
)
WORKTREE_FORKED = (
    "The fork works in a worktree of its own, starting from the source's worktree as it is"
    " now; the turns it copied cannot be undone from it."
)


_FORK_MARK = re.compile(r" \(fork(?: (\d+))?\)$")


def fork_title(title: str) -> str:
    """The title of a fork of a session titled `title`: `T (fork)`, and a fork of that
    `T (fork 2)`, not `T (fork) (fork)`; "" for an untitled session."""
    if not title:
        return ""
    mark = _FORK_MARK.search(title)
    if mark is None:
        return f"{title} (fork)"
    return f"{title[: mark.start()]} (fork {int(mark.group(1) or 1) + 1})"


def _cut(source: Session, turn_id: str | None) -> tuple[list[TurnState], str | None]:
    """The turns a fork after `turn_id` keeps and the first turn it leaves out."""
    turns = source.turns
    running = source.running_turn_id
    if turn_id is None:
        return [turn for turn in turns if turn.status != "running"], running
    if turn_id == running:
        raise RpcError(
            ErrorCode.SESSION_BUSY,
            f"turn {turn_id} of {source.id} is still running; fork at an earlier turn, or"
            " without a turn to keep the completed ones",
        )
    turn = source.turn(turn_id)
    if turn is None:
        raise RpcError(ErrorCode.TURN_NOT_FOUND, f"session {source.id} has no turn {turn_id!r}")
    index = turns.index(turn)
    return turns[: index + 1], turns[index + 1].id if index + 1 < len(turns) else None


async def fork_session(
    sessions: Sessions, source_id: str, turn_id: str | None, *, title: str = "", by: str = ""
) -> Session:
    """Fork `source_id` after `turn_id` (None: its completed turns) and return the fork,
    loaded. SESSION_NOT_FOUND, TURN_NOT_FOUND, SESSION_BUSY (`turn_id` is running) or
    INVALID_PARAMS (`title`) leave nothing behind.

    Cancellation: once the copy is queued it happens; cancelling only stops waiting."""
    name = clean_title(title)
    source = await sessions.get(source_id)
    _cut(source, turn_id)  # refused before a worktree is made
    if not name:
        name = fork_title(source.title)
    now = time.time()
    row = SessionRow(
        id=new_id("s"),
        title=name,
        created_at=now,
        updated_at=now,
        turn_count=0,
        running_turn=None,
        model=source.model,
        permission_mode=source.permission_mode,
        forked_from=source.id,
    )
    parent = source.worktree
    async with AsyncExitStack() as owned:
        if parent is not None:
            made = await fork_worktree(
                sessions.workspace, sessions.store.path.parent, row.id, name, parent
            )
            await owned.enter_async_context(removed_unless_stored(sessions.workspace, made))
            row.worktree_root, row.worktree_branch, row.worktree_base = (
                made.root,
                made.branch,
                made.base,
            )
        # Cut again after the await: a turn may have ended or started meanwhile (a completed
        # turn stays completed, so this refuses nothing the first cut let through).
        kept, left_out = _cut(source, turn_id)
        row.turn_count = len(kept)
        row.last_status = kept[-1].status if kept else None
        row.forked_turn = kept[-1].id if kept else ""
        digests = [
            image.sha256
            for turn in kept
            for item in turn.items.values()
            if isinstance(item, UserMessage | ToolCall)
            for image in item.images
        ]
        # Queued before anything awaits: the copy holds exactly the events of the cut. Its
        # worktree is on disk: the fork is written before it is answered, as `Sessions.create`
        # does, and the worktree removed when it cannot be.
        await sessions.store.fork_session(row, source.id, left_out)
    # Then the images, before the fork is loaded (loading reads the bytes its messages name).
    await trio.to_thread.run_sync(sessions.images.copy_session, source.id, row.id, digests)
    fork = await sessions.get(row.id)
    if fork.title != name:
        fork.emit(SessionRenamed(title=name, by=by))
    else:
        sessions.store.update_session_nowait(fork.row())
    return fork
