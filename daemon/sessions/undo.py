"""Undo: what a turn's tools wrote, and putting it back.

Rules:
- Before a tool first writes (or deletes) a file in a turn, `TurnChanges.before_write` saves
  the file's content — or the fact that it did not exist — in the store's `snapshots` table.
  Later writes of the same file in the same turn keep that first snapshot.
- After every write, the hash of what the turn left in the file is recorded with the snapshot
  (`after_digest`), so undo can tell which files someone changed after the turn.
- `undo_turn` restores every file the turn changed and removes the files it created. Files
  whose content is no longer what the turn left are conflicts: unless forced, nothing at all is
  touched and the conflicts are listed; forced, they are restored too.
- An undone turn is marked in the store, so it cannot be undone twice; the default turn to undo
  (`last_turn_with_changes`) is the latest one not yet undone, so repeated undos walk back.
- Each file is put back atomically (`atomic_write`, keeping its mode); a file whose path now
  leads out of the workspace or into a symlink loop is a conflict and is never written.
- Files are read, written and removed from the workspace root's descriptor without following
  symlinks (`beneath`): a folder swapped for a symlink after the check fails that file
  (listed as a conflict) instead of steering the daemon outside the workspace.
- Snapshots live in SQLite: they survive a daemon restart.
- Only file writes by tools are covered; what commands did is not (the result says so).

Errors: `UndoError` ← `NothingToUndo` (the turn changed no files, or was already undone).
"""

import hashlib
import os
import time
from pathlib import Path

import trio

from tether.daemon.beneath import read_beneath, unlink_beneath
from tether.daemon.sessions.rows import SnapshotRow
from tether.daemon.sessions.store import Store
from tether.daemon.tools.atomic_write import atomic_write
from tether.daemon.tools.base import loop_point
from tether.daemon.tools.edits import line_delta
from tether.protocol.items import FileChange
from tether.protocol.methods import SessionUndoResult

NOTE = (
    "Only files written by tools (edit_file, write_file) are restored; effects of commands "
    "(run_command) are not undone."
)


class UndoError(Exception):
    pass


class NothingToUndo(UndoError):
    """The turn changed no files, or it was already undone."""


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(root: Path, path: Path) -> bytes | None:
    try:
        return read_beneath(root, path)[0]
    except (FileNotFoundError, NotADirectoryError):
        return None


class TurnChanges:
    """The `ChangeTracker` of one turn: undo snapshots in the store, and the turn's
    files-changed summary."""

    def __init__(self, store: Store, workspace: Path, session_id: str, turn_id: str) -> None:
        self.store = store
        self.root = workspace.resolve()
        self.session_id = session_id
        self.turn_id = turn_id
        self._original: dict[Path, bytes | None] = {}
        self._latest: dict[Path, bytes | None] = {}

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _snapshot(self, path: Path, data: bytes | None) -> None:
        self._original[path] = data
        self._latest[path] = data
        self.store.save_snapshot_nowait(
            SnapshotRow(
                session_id=self.session_id,
                turn_id=self.turn_id,
                path=self._rel(path),
                content=data,
                size=None if data is None else len(data),
                digest=_digest(data),
                after_digest=_digest(data),
                created_at=time.time(),
            )
        )

    async def before_write(self, path: Path) -> None:
        """Snapshot `path` the first time the turn writes it (queued; not waited for)."""
        if path in self._original:
            return
        data = await trio.to_thread.run_sync(_read, self.root, path)
        if path not in self._original:  # checked again: another call may have won meanwhile
            self._snapshot(path, data)

    def after_write(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        if path not in self._original:
            self._snapshot(path, before)  # a write without before_write: best effort
        self._latest[path] = after
        self.store.update_snapshot_after_nowait(
            self.session_id, self.turn_id, self._rel(path), _digest(after)
        )

    def files_changed(self) -> list[FileChange]:
        """Each file whose content differs from before the turn, with lines added and removed
        (in the order the turn first wrote them)."""
        changes: list[FileChange] = []
        for path, original in self._original.items():
            latest = self._latest[path]
            if original == latest:
                continue
            added, removed = line_delta(
                "" if original is None else original.decode("utf-8", "replace"),
                "" if latest is None else latest.decode("utf-8", "replace"),
            )
            changes.append(
                FileChange(
                    path=self._rel(path),
                    added=added,
                    removed=removed,
                    created=original is None,
                    deleted=latest is None,
                )
            )
        return changes


async def last_turn_with_changes(store: Store, session_id: str) -> str | None:
    """The session's latest turn that wrote files and was not undone."""
    return await store.last_snapshot_turn(session_id)


async def undo_turn(
    store: Store, workspace: Path, session_id: str, turn_id: str, force: bool = False
) -> SessionUndoResult:
    """Put back every file turn `turn_id` wrote (see the module rules). Raises NothingToUndo.

    Cancellation: cancelled before the file work begins, nothing is done; once it has begun it
    is finished, the turn marked undone and the result returned, however the caller is
    cancelled meanwhile (a client cancelling its `session/undo` then gets that result).
    """
    rows = await store.load_snapshots(session_id, turn_id)
    if not rows:
        raise NothingToUndo(f"Turn {turn_id} changed no files.")
    if all(row.undone for row in rows):
        raise NothingToUndo(f"Turn {turn_id} was already undone.")
    await trio.lowlevel.checkpoint_if_cancelled()
    result: SessionUndoResult | None = None
    with trio.CancelScope(shield=True):
        result = await _restore(store, workspace, session_id, turn_id, rows, force)
    assert result is not None  # shielded, the scope cannot have swallowed a cancellation
    return result


async def _restore(
    store: Store,
    workspace: Path,
    session_id: str,
    turn_id: str,
    rows: list[SnapshotRow],
    force: bool,
) -> SessionUndoResult:
    result = await trio.to_thread.run_sync(_undo_files, workspace, turn_id, rows, force)
    if result.applied:
        await store.mark_snapshots_undone(session_id, turn_id)
    return result


def _inside(root: Path, rel: str) -> Path | None:
    """The file `rel` resolves to, or None if it is now outside the workspace or a symlink
    loop (never followed, never written)."""
    try:
        path = Path(os.path.realpath(root / rel))
    except OSError:  # a link on the path changed while it was being resolved
        return None
    return path if root in path.parents and loop_point(path) is None else None


def _undo_files(
    workspace: Path, turn_id: str, rows: list[SnapshotRow], force: bool
) -> SessionUndoResult:
    root = workspace.resolve()
    conflicts: list[str] = []
    plan: list[tuple[SnapshotRow, Path, bytes | None]] = []
    for row in rows:
        path = _inside(root, row.path)
        if path is None:  # a symlink now leads out of the workspace, or loops
            conflicts.append(row.path)
            continue
        try:
            current = _read(root, path)
        except OSError:  # a symlink or something not a file now stands in its place
            conflicts.append(row.path)
            continue
        if _digest(current) != row.after_digest:
            conflicts.append(row.path)
        plan.append((row, path, current))
    if conflicts and not force:
        return SessionUndoResult(
            turn_id=turn_id,
            applied=False,
            conflicts=conflicts,
            note=(
                f"{len(conflicts)} file(s) changed since the turn ended, so nothing was undone. "
                "Undo again with force to restore them anyway. " + NOTE
            ),
        )
    restored: list[str] = []
    removed: list[str] = []
    for row, path, current in plan:
        try:
            if row.content is None:
                if current is not None:
                    unlink_beneath(root, path)
                    removed.append(row.path)
            elif current != row.content:
                atomic_write(path, row.content, root=root, make_folders=True)
                restored.append(row.path)
        except OSError:  # its path changed since it was checked: left alone, reported
            conflicts.append(row.path)
    return SessionUndoResult(
        turn_id=turn_id,
        applied=True,
        restored=restored,
        removed=removed,
        conflicts=conflicts,
        note=NOTE,
    )
