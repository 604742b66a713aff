"""The context a client sends with a turn: its open file and cursor, a selection, and mentions
of files and folders, rendered as a block of text for the model.

Rules:
- The open file is named with the cursor (1-based line and column, as an editor shows them);
  its content is not attached (the model can read it).
- A selection is capped at 6,000 characters, keeping its head and tail.
- Mentioned files share a budget of 40,000 characters in all: a file that fits its share is
  attached whole, a longer one middle-truncated (head and tail kept, the cut marked). Shares are
  fair: small files take what they need and the rest is split evenly among the larger ones.
  Files over 1 MiB are read only at both ends, and their length is counted in bytes.
- Attachments (texts the client sends itself, such as what was piped into the CLI) share the
  files' budget and are cut the same way (each cut one is reported to the client with how much
  was left out); one whose first 8 KiB hold a NUL is binary and
  reported instead.
- A mentioned folder is attached as a listing of its first 100 entries (sorted, folders ending
  in '/'), with the total count.
- A mentioned image file (PNG, JPEG, GIF, WebP by its magic bytes) is not rendered here: it
  goes with the message as an image (`image_file`, `tether.daemon.sessions.input`).
- A path outside the workspace (symlinks followed), a missing path, or a binary, special or
  unreadable file is not attached, but it is not dropped either: the block tells the model the
  user mentioned it and why it is missing, and `render_context` returns the problem for the
  client.

Mentioned files and folders are read and listed from descriptors opened beneath the workspace
(`tether.daemon.beneath`): a folder swapped for a symlink after the check above is not
followed, and the mention is reported unreadable.

`render_context` reads the file system synchronously; call it from a worker thread in async
code. (The CLI finds `@path` mentions in a typed prompt: `clients/cli/mentions.py`.)
"""

import os
from collections.abc import Sequence
from pathlib import Path

from tether.daemon.beneath import list_beneath, open_beneath
from tether.daemon.tools.binary import is_binary
from tether.daemon.truncate import cap_ends, cap_result
from tether.daemon.workspace import display_path
from tether.protocol.images import sniff_image

SELECTION_CAP = 6000
FILES_BUDGET = 40_000
OPEN_FILES_SHOWN = 20
FOLDER_ENTRIES = 100
READ_LIMIT = 1 << 20
"""Files larger than this (bytes) are read only at their head and tail."""


class _FileText:
    """A mentioned file's text: whole (`tail` empty), or for a large file its head and tail
    with `length` standing for the whole (in bytes, close to characters for source code)."""

    __slots__ = ("display", "head", "length", "tail")

    def __init__(self, display: str, head: str, tail: str, length: int) -> None:
        self.display = display
        self.head = head
        self.tail = tail
        self.length = length

    def within(self, limit: int) -> str:
        """The text in at most `limit` characters, middle-truncated when longer."""
        if not self.tail:
            return cap_result(self.head, limit)
        return cap_ends(self.head, self.tail, self.length, limit)


class _Problem(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _resolve(root: Path, path: str) -> Path:
    """`path` (relative to the workspace, absolute, or starting with `~`) resolved with
    symlinks followed; raises _Problem when it is outside the workspace or does not exist."""
    target = _target(root, path)
    if target is None:
        raise _Problem("not a usable path")
    if target != root and root not in target.parents:
        raise _Problem("outside the workspace")
    try:
        if not target.exists():
            raise _Problem("not found")
        if not target.is_dir() and not target.is_file():
            raise _Problem("not a regular file")
    except OSError as exc:  # a name too long for the file system, a folder without access
        raise _Problem(exc.strerror or "cannot be read") from exc
    return target


def _target(root: Path, path: str) -> Path | None:
    """`path` made absolute and resolved, or None when that fails (a NUL byte, a loop)."""
    try:
        return (root / os.path.expanduser(path)).resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def _open_elsewhere(root: Path, open_files: Sequence[str], active: str | None) -> list[str]:
    """The open files to name besides the active one: inside the workspace (a path outside
    it is not the model's business), each once, at most `OPEN_FILES_SHOWN`."""
    shown: list[str] = []
    skip = _target(root, active) if active else None
    seen: set[Path] = set() if skip is None else {skip}
    for path in open_files:
        target = _target(root, path)
        if target is None or target in seen or not (target == root or root in target.parents):
            continue
        seen.add(target)
        shown.append(display_path(root, target))
        if len(shown) == OPEN_FILES_SHOWN:
            break
    return shown


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _display(root: Path, path: Path) -> str:
    rel = display_path(root, path)
    if path.is_dir():
        return "./" if rel == "." else rel + "/"
    return rel


def _read_file(root: Path, path: Path, display: str) -> _FileText:
    try:
        with open_beneath(root, path) as (file, status):
            size = status.st_size
            if size <= READ_LIMIT:
                data = file.read()
                if is_binary(data):
                    raise _Problem("a binary file")
                text = data.decode("utf-8", errors="replace")
                return _FileText(display, text, "", len(text))
            head = file.read(READ_LIMIT // 2)
            if is_binary(head):
                raise _Problem("a binary file")
            file.seek(size - READ_LIMIT // 2)
            tail = file.read()
    except OSError as exc:
        raise _Problem(f"unreadable ({exc.strerror or exc})") from exc
    return _FileText(
        display,
        head.decode("utf-8", errors="replace"),
        tail.decode("utf-8", errors="replace"),
        size,
    )


def _folder_listing(root: Path, path: Path, display: str) -> str:
    try:
        names = [name + "/" if is_dir else name for name, is_dir in list_beneath(root, path)]
    except OSError as exc:
        raise _Problem(f"unreadable ({exc.strerror or exc})") from exc
    names.sort()
    shown = names[:FOLDER_ENTRIES]
    if len(names) > FOLDER_ENTRIES:
        count = f'entries="{len(names)}" shown="{len(shown)}"'
    else:
        count = f'entries="{len(names)}"'
    listing = "\n".join(shown) if shown else "(empty)"
    if len(names) > FOLDER_ENTRIES:
        listing += f"\n… and {len(names) - FOLDER_ENTRIES} more entries (not shown)"
    return f'<folder path="{_attr(display)}" {count}>\n{listing}\n</folder>'


def file_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Split `budget` characters fairly among files of these lengths: each file gets what it
    needs, or an even share of what the smaller files left, whichever is less."""
    shares = [0] * len(lengths)
    remaining = budget
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for position, index in enumerate(order):
        share = remaining // (len(order) - position)
        shares[index] = min(lengths[index], share)
        remaining -= shares[index]
    return shares


def render_context(
    workspace: Path,
    *,
    open_file: str | None = None,
    cursor: tuple[int, int] | None = None,
    selection: str | None = None,
    open_files: Sequence[str] = (),
    mentions: Sequence[str] = (),
    attachments: Sequence[tuple[str, str]] = (),
) -> tuple[str, list[str]]:
    """The block of context to put before the user's message ("" when there is none) and the
    problems to report to the client (one line per path that could not be attached)."""
    root = workspace.resolve()
    parts: list[str] = []
    problems: list[str] = []
    missing: list[str] = []

    def report(path: str, reason: str) -> None:
        problems.append(f"{path}: {reason}; not attached")
        missing.append(f"{path} ({reason})")

    if open_file:
        where = f", cursor at line {cursor[0]}, column {cursor[1]}" if cursor is not None else ""
        target = _target(root, open_file)
        if target is not None and (target == root or root in target.parents):
            shown = display_path(root, target)
            parts.append(f"The user's editor has {shown} open{where}.")
        else:
            shown = open_file
            problems.append(f"{open_file}: the open file is outside the workspace")
            parts.append(f"The user's editor has {shown} open{where} (outside the workspace).")
        if selection and selection.strip():
            parts.append(
                f'<selection file="{_attr(shown)}">\n{cap_result(selection, SELECTION_CAP)}\n'
                "</selection>"
            )
    elif selection and selection.strip():
        parts.append(f"<selection>\n{cap_result(selection, SELECTION_CAP)}\n</selection>")
    others = _open_elsewhere(root, open_files, open_file)
    if others:
        parts.append(f"Also open in the editor: {', '.join(others)}.")

    texts: list[_FileText] = []
    for name, text in attachments:
        if is_binary(text):
            report(name, "binary")
        else:
            texts.append(_FileText(name, text, "", len(text)))
    files: list[_FileText] = []
    folders: list[str] = []
    seen: set[Path] = set()
    for mention in dict.fromkeys(mentions):
        try:
            target = _resolve(root, mention)
            if target in seen:
                continue
            seen.add(target)
            display = _display(root, target)
            if target.is_dir():
                folders.append(_folder_listing(root, target, display))
            else:
                files.append(_read_file(root, target, display))
        except _Problem as problem:
            report(mention, problem.reason)

    shares = file_shares([f.length for f in (*texts, *files)], FILES_BUDGET)
    for index, (file, share) in enumerate(zip((*texts, *files), shares, strict=True)):
        tag, key = ("attachment", "name") if index < len(texts) else ("file", "path")
        attrs = f'{key}="{_attr(file.display)}" characters="{file.length}"'
        if share < file.length:
            attrs += ' truncated="true"'
            problems.append(
                f"{file.display}: {file.length:,} characters, attached cut to {share:,}"
                f" ({file.length - share:,} left out of the middle; the files and texts sent"
                f" with a message share {FILES_BUDGET:,})"
            )
        parts.append(f"<{tag} {attrs}>\n{file.within(share)}\n</{tag}>")
    parts.extend(folders)
    if missing:
        parts.append("Mentioned by the user but not attached: " + "; ".join(missing) + ".")
    if not parts:
        return "", problems
    return "<context>\n" + "\n\n".join(parts) + "\n</context>", problems


def image_file(workspace: Path, mention: str) -> tuple[str, Path] | None:
    """(its display path, the file) when `mention` names an image file inside the workspace
    (by its magic bytes, `tether.protocol.images`), else None: a mentioned image is sent as an
    image rather than read as text. A path that is no usable file is left to
    `render_context`, which reports it."""
    root = workspace.resolve()
    try:
        target = _resolve(root, mention)
        if not target.is_file():
            return None
        with open_beneath(root, target) as (file, _):
            head = file.read(16)
    except (_Problem, OSError):
        return None
    if sniff_image(head) is None:
        return None
    return display_path(root, target), target
