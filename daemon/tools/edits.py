"""What edit_file and write_file share: the edit guard, the guarded write, diffs and counts, and
`FileEditTool`, the preview-then-write shape both tools have.

The edit guard: a file may be changed or overwritten only if this agent has read it (read_file
records a `FileVersion`) and its content is still what the agent last saw. A change by anyone
else (the user, a command, another session) makes the recorded version stale, and the tool
refuses until the file is read again. After a tool writes, it records the new version itself,
so consecutive edits need no re-read.

Every write goes through the turn's `ChangeTracker` (undo snapshot before, summary after) and
is atomic (`atomic_write`): a write that fails leaves the file as it was, and says so. Reads
and writes reach the checked path from the workspace root without following symlinks
(`beneath`), so a folder swapped for a symlink after the check fails the call.
"""

import difflib
import errno
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Generic, TypeVar

import msgspec
import trio

from tether.daemon.beneath import read_beneath, status_beneath
from tether.daemon.tools.atomic_write import atomic_write
from tether.daemon.tools.base import (
    FileVersion,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolOutput,
    ToolParams,
    resolved_and_shown,
)

_NO_NEWLINE = "\\ No newline at end of file\n"


def decode(data: bytes) -> str:
    """File bytes to text that encodes back to the same bytes (invalid UTF-8 survives)."""
    return data.decode("utf-8", errors="surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def digest(data: bytes) -> str:
    """The content hash `FileVersion` records."""
    return hashlib.sha256(data).hexdigest()


def check_guard(shown: str, current: bytes, seen: FileVersion | None) -> None:
    """Refuse (ToolFailure) unless the agent's last read or write of the file saw `current`."""
    if seen is None:
        raise ToolFailure(
            f"{shown} has not been read in this session. Read it with read_file first, then "
            "make the change."
        )
    if digest(current) != seen.digest:
        raise ToolFailure(
            f"{shown} changed on disk since you last read it (edited by the user, a command or "
            "another session). Read it again with read_file, then make the change."
        )


def read_current(root: Path, path: Path, shown: str) -> bytes | None:
    """The content of the file `path` (resolved, inside `root`), or None when there is none,
    read without following a symlink. Raises ToolFailure for a folder, something that is not a
    regular file, or a path a symlink now interrupts (it changed since it was checked)."""
    try:
        return read_beneath(root, path)[0]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        raise ToolFailure(f"{shown} is a directory.") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolFailure(
                f"{shown} changed while it was being used (a symlink took the place of a "
                "folder or the file); it was not read. Check the path, then try again."
            ) from None
        if exc.errno == errno.EINVAL:
            raise ToolFailure(f"{shown} is not a regular file.") from None
        raise ToolFailure(f"Could not read {shown}: {exc}.") from exc


def _write_checked(
    root: Path, path: Path, shown: str, expected: bytes | None, after: bytes
) -> None:
    current = read_current(root, path, shown)
    if current != expected:
        raise ToolFailure(f"{shown} changed while the change was being made; read it again.")
    try:
        atomic_write(path, after, root=root, make_folders=True)
    except OSError as exc:
        unchanged = "was left unchanged" if expected is not None else "was not created"
        raise ToolFailure(f"Could not write {shown}: {exc}. The file {unchanged}.") from exc


def _status_after_write(root: Path, path: Path) -> os.stat_result | None:
    try:
        return status_beneath(root, path)
    except OSError:
        return None


async def write_guarded(
    ctx: ToolContext, path: Path, shown: str, before: bytes | None, after: bytes
) -> str:
    """Write `after` to `path` (creating folders), provided it still holds `before` (None: no
    file); snapshot it for undo first, report the change and record the new version. Returns
    the change's diff for the result (`change_diff`)."""
    await ctx.changes.before_write(path)
    root = ctx.workspace.resolve()
    await trio.to_thread.run_sync(_write_checked, root, path, shown, before, after)
    ctx.changes.after_write(path, before, after)
    status = await trio.to_thread.run_sync(_status_after_write, root, path)
    if status is None:  # its path changed just after the write: the next edit reads it again
        ctx.versions.forget(path)
    else:
        ctx.versions.record(path, FileVersion.of_status(status, after))
    return change_diff(shown, before, after)


def unified_diff(shown: str, before: bytes | None, after: bytes) -> str:
    old = [] if before is None else before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    diff = difflib.unified_diff(
        old, new, fromfile="/dev/null" if before is None else f"a/{shown}", tofile=f"b/{shown}"
    )
    lines = [line if line.endswith("\n") else f"{line}\n{_NO_NEWLINE}" for line in diff]
    return "".join(lines) or f"(no changes to {shown})\n"


def change_diff(shown: str, before: bytes | None, after: bytes) -> str:
    """The unified diff a write of `after` over `before` (None: no file) made; "" when the
    content stays the same."""
    return "" if before == after else unified_diff(shown, before, after)


def line_delta(before: str, after: str) -> tuple[int, int]:
    """(lines added, lines removed) going from `before` to `after`."""
    old = before.splitlines()
    new = after.splitlines()
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=len(old) + len(new) > 4000)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class FileParams(ToolParams, frozen=True, kw_only=True):
    """The parameters of a tool that changes one file: its path first, then the tool's own."""

    path: Annotated[str, msgspec.Meta(description="File path, relative to the workspace root.")]


@dataclass(frozen=True, slots=True)
class FileTarget:
    """The file one call names: the workspace root it was checked against, where it is, its
    name as shown, and the version of it the agent last read or wrote (None: never)."""

    root: Path
    path: Path
    shown: str
    seen: FileVersion | None


@dataclass(frozen=True, slots=True)
class FilePlan:
    """The content one call would leave in one file, and what its result will say."""

    path: Path
    shown: str
    before: bytes | None
    """None: the file does not exist."""
    after: bytes
    summary: str


P = TypeVar("P", bound=FileParams)


class FileEditTool(Generic[P]):
    """A tool that computes a file's new content (`plan_file`, which checks the edit guard and
    raises ToolFailure on a call it refuses), shows it as a diff for the permission gate
    (`preview`) and writes it guarded (`run`, which plans again: the file may have changed
    while the user decided)."""

    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]]

    def target_path(self, params: P) -> str:
        return params.path

    def plan_file(self, params: P, file: FileTarget) -> FilePlan:
        """The plan for `file`. Blocking: runs in a worker thread."""
        raise NotImplementedError

    async def plan(self, params: P, ctx: ToolContext) -> FilePlan:
        path, shown = resolved_and_shown(ctx.workspace, params.path)
        file = FileTarget(ctx.workspace.resolve(), path, shown, ctx.versions.get(path))
        return await trio.to_thread.run_sync(self.plan_file, params, file)

    async def preview(self, params: P, ctx: ToolContext) -> str:
        plan = await self.plan(params, ctx)
        return unified_diff(plan.shown, plan.before, plan.after)

    async def run(self, params: P, ctx: ToolContext) -> ToolOutput:
        plan = await self.plan(params, ctx)
        diff = await write_guarded(ctx, plan.path, plan.shown, plan.before, plan.after)
        return ToolOutput(text=plan.summary, diff=diff)
