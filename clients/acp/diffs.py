"""A tool call's unified diff as ACP `diff` content: per file, its text before and after.

ACP wants whole texts; tether's items carry the unified diff of the edit (paths relative to
the workspace, `/dev/null` for a created file). When the file on disk still reads as the
diff's result, the whole file is given (its text now, and the diff undone on it for the
before); otherwise — the file changed since, or the diff was capped — the hunks alone are,
which still shows what changed, without the rest of the file. An edit waiting for approval
(`pending`) reads the other way: the file on disk is its before, the diff applied its after.
"""

import re
from pathlib import Path
from typing import NamedTuple

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class Hunk(NamedTuple):
    old_start: int
    """1-based; 0 for an empty old side."""
    new_start: int
    """1-based; 0 for an empty new side."""
    old: list[str]
    new: list[str]


class FileDiff(NamedTuple):
    path: str
    """As the diff names it, relative to the workspace."""
    created: bool
    deleted: bool
    hunks: list[Hunk]


class Change(NamedTuple):
    """One file's change as ACP shows it."""

    path: Path
    old_text: str | None
    """None for a created file."""
    new_text: str


def parse(diff: str) -> list[FileDiff]:
    """The files of a unified diff; what does not parse (a capped tail) is left out."""
    files: list[FileDiff] = []
    lines = diff.splitlines(keepends=True)
    index = 0
    old_name = ""
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("--- "):
            old_name = line[4:].strip()
            continue
        if not line.startswith("+++ ") or not old_name:
            continue
        new_name = line[4:].strip()
        created, deleted = old_name == "/dev/null", new_name == "/dev/null"
        name = old_name if deleted else new_name
        path = name[2:] if name.startswith(("a/", "b/")) else name
        hunks: list[Hunk] = []
        while index < len(lines) and (match := _HUNK.match(lines[index])):
            index += 1
            old_count = int(match.group(2) or "1")
            new_count = int(match.group(4) or "1")
            old: list[str] = []
            new: list[str] = []
            marker = ""
            while index < len(lines) and (
                len(old) < old_count or len(new) < new_count or lines[index].startswith("\\")
            ):
                body = lines[index]
                index += 1
                if body.startswith("\\"):  # "\ No newline at end of file": the line before
                    if marker in (" ", "-") and old:
                        old[-1] = old[-1].rstrip("\n")
                    if marker in (" ", "+") and new:
                        new[-1] = new[-1].rstrip("\n")
                    continue
                marker, text = body[:1], body[1:]
                if marker in (" ", "-"):
                    old.append(text)
                if marker in (" ", "+"):
                    new.append(text)
                if marker not in (" ", "-", "+"):
                    break
            if len(old) != old_count or len(new) != new_count:
                break  # cut off
            hunks.append(Hunk(int(match.group(1)), int(match.group(3)), old, new))
        files.append(FileDiff(path, created, deleted, hunks))
        old_name = ""
    return files


def changes(diff: str, workspace: Path) -> list[Change]:
    """A made edit's files as whole texts where the disk allows, else as their hunks."""
    return _changes(diff, workspace, made=True)


def pending(diff: str, workspace: Path) -> list[Change]:
    """An edit not made yet (an approval's preview), as whole texts where the file on disk
    still reads as its before, else as its hunks."""
    return _changes(diff, workspace, made=False)


def _changes(diff: str, workspace: Path, *, made: bool) -> list[Change]:
    result: list[Change] = []
    for file in parse(diff):
        path = workspace / file.path
        old_hunks = "".join(line for hunk in file.hunks for line in hunk.old)
        new_hunks = "".join(line for hunk in file.hunks for line in hunk.new)
        if file.created:
            result.append(Change(path, None, new_hunks))
            continue
        if file.deleted:
            result.append(Change(path, old_hunks, ""))
            continue
        current = _read(path)
        other = _splice(file.hunks, current, made=made)
        if current is None or other is None:
            result.append(Change(path, old_hunks, new_hunks))
        else:
            result.append(Change(path, other, current) if made else Change(path, current, other))
    return result


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _splice(hunks: list[Hunk], current: str | None, *, made: bool) -> str | None:
    """The file's other text: when `made`, `current` holds every hunk's new side where the
    diff puts it and the old sides replace them; else it holds the old sides, and the new
    sides replace them. None when it does not hold them."""
    if current is None or not hunks:
        return None
    lines = current.splitlines(keepends=True)
    other: list[str] = []
    position = 0
    for hunk in hunks:
        start, found, wanted = (
            (hunk.new_start, hunk.new, hunk.old) if made else (hunk.old_start, hunk.old, hunk.new)
        )
        start = max(start - 1, 0) if found else start
        if start < position or lines[start : start + len(found)] != found:
            return None
        other.extend(lines[position:start])
        other.extend(wanted)
        position = start + len(found)
    other.extend(lines[position:])
    return "".join(other)
