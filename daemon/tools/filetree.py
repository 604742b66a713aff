"""Walking the workspace: which folders are skipped, glob patterns, and ignore files.

Glob syntax (as in ripgrep's `--glob` and `.gitignore`): `*` and `?` stay within one path
segment, `**` spans folders (`**/x`, `a/**/b`, `a/**`), `[abc]`/`[!abc]` are classes and
`{a,b}` alternatives; `pathglob` matches them in bounded time. A gitignore-style pattern
without a `/` (other than a trailing one) matches a name at any depth; with one, it is
anchored to the folder of its ignore file (or to the workspace, for a `--glob`).
"""

import contextlib
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from tether.daemon.beneath import (
    folder_descriptor,
    list_beneath,
    open_folder,
    open_subfolder,
    read_at,
    read_beneath,
)
from tether.daemon.pathglob import GlobError, compile_glob
from tether.daemon.tools.base import ToolParams


@runtime_checkable
class FileSearch(Protocol):
    """A read tool that selects files by a glob as well as a path (grep, glob). The
    permission gate checks the glob as it checks the path: a search leaves credential-like
    files out unless its path or glob names them, and then the gate asks."""

    def file_glob(self, params: ToolParams) -> str: ...


DEPENDENCY_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "bower_components",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".gradle",
        ".cache",
    }
)
"""Folders of installed dependencies, caches and version control: glob and grep skip them,
list_dir counts them without listing them."""

BUILD_DIRS = frozenset(
    {"dist", "build", "target", "out", ".next", ".nuxt", ".turbo", "coverage", ".eggs"}
)
"""Build output: glob skips these too."""

MAX_WALK_LEVELS = 256
"""Folders open at once in a walk (`walk_files`): its depth below where it starts."""

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
"""Read in this order in every folder (a later file wins), as ripgrep does."""


def folder_entries(root: Path, folder: Path) -> tuple[list[str], list[str]]:
    """One level of `folder` (resolved, inside the resolved `root`), named as list_dir shows
    them (folders end in `/`): the entries, and apart the dependency folders among them
    (`DEPENDENCY_DIRS`), both unsorted. The folder is reached and listed from descriptors
    (`list_beneath`), so one swapped for a symlink is not listed. An entry whose kind cannot
    be read counts as a file. Raises OSError when `folder` cannot be reached or read."""
    names: list[str] = []
    dependencies: list[str] = []
    for name, is_dir in list_beneath(root, folder):
        if is_dir and name in DEPENDENCY_DIRS:
            dependencies.append(name + "/")
        else:
            names.append(name + "/" if is_dir else name)
    return names, dependencies


def is_skipped_dir(name: str, *, build: bool = True) -> bool:
    return (
        name in DEPENDENCY_DIRS
        or (build and name in BUILD_DIRS)
        or (build and name.endswith(".egg-info"))
    )


class GitignorePattern:
    """One pattern with gitignore semantics, relative to a base folder."""

    __slots__ = ("anchored", "dir_only", "glob", "negated")

    def __init__(self, pattern: str) -> None:
        """Raises GlobError for a pattern `compile_glob` refuses."""
        self.negated = pattern.startswith("!")
        if self.negated:
            pattern = pattern[1:]
        self.dir_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        self.anchored = "/" in pattern
        self.glob = compile_glob(pattern.lstrip("/"))

    def matches(self, rel: str, is_dir: bool) -> bool:
        """`rel`: the path relative to the pattern's base folder."""
        if self.dir_only and not is_dir:
            return False
        if self.anchored:
            return self.glob.match(rel)
        return self.glob.match(rel.rsplit("/", 1)[-1])


def parse_ignore_file(text: str) -> list[GitignorePattern]:
    patterns: list[GitignorePattern] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if raw.endswith("\\ "):
            line += " "
        if not line or line.startswith("#"):
            continue
        if line.startswith(("\\#", "\\!")):
            line = line[1:]
        with contextlib.suppress(GlobError):  # as git does, a pattern it cannot use is skipped
            patterns.append(GitignorePattern(line))
    return patterns


class IgnoreRules:
    """The ignore files that apply to one folder: its own and those of its ancestors within
    the root (the deepest decides; within a folder, the last matching pattern)."""

    def __init__(self, levels: "tuple[tuple[str, tuple[GitignorePattern, ...]], ...]" = ()) -> None:
        self._levels = levels

    def child(self, folder: int, rel: str) -> "IgnoreRules":
        """The rules for the subfolder open as `folder` (at `rel` from the root): these plus
        its ignore files."""
        patterns: list[GitignorePattern] = []
        for name in IGNORE_FILES:
            try:
                data, _ = read_at(folder, name)
            except OSError:
                continue
            patterns.extend(parse_ignore_file(data.decode("utf-8", errors="replace")))
        if not patterns:
            return self
        return IgnoreRules((*self._levels, (rel, tuple(patterns))))

    def with_patterns(self, rel: str, patterns: list[GitignorePattern]) -> "IgnoreRules":
        if not patterns:
            return self
        return IgnoreRules((*self._levels, (rel, tuple(patterns))))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for base, patterns in reversed(self._levels):
            sub = rel[len(base) + 1 :] if base else rel
            for pattern in reversed(patterns):
                if pattern.matches(sub, is_dir):
                    return not pattern.negated
        return False


def rules_for(root: Path, folder: Path) -> IgnoreRules:
    """The ignore rules in force in `folder` (resolved, inside `root`): `.git/info/exclude`
    and the ignore files of `root` and of every folder down to `folder`, each read from its
    folder's descriptor."""
    rules = IgnoreRules()
    with contextlib.suppress(OSError):
        exclude, _ = read_beneath(root, root / ".git" / "info" / "exclude")
        rules = rules.with_patterns("", parse_ignore_file(exclude.decode(errors="replace")))
    with contextlib.suppress(OSError):  # a folder that cannot be reached: walked as nothing
        with open_folder(root, root) as fd:
            rules = rules.child(fd, "")
        current = root
        for part in folder.relative_to(root).parts:
            current = current / part
            with open_folder(root, current) as fd:
                rules = rules.child(fd, current.relative_to(root).as_posix())
    return rules


def relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel


def join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


class WalkedFile:
    """A file found by `walk_files`, usable until the walk moves on: its folder stays open
    for it, and it is stated and read relative to that folder, never by its full name."""

    __slots__ = ("_entry", "_folder")

    def __init__(self, folder: int, entry: os.DirEntry[str]) -> None:
        self._folder = folder
        self._entry = entry

    @property
    def name(self) -> str:
        return self._entry.name

    def stat(self) -> os.stat_result:
        """Its status (a symlink is not followed; the walk yields none anyway)."""
        return self._entry.stat(follow_symlinks=False)

    def read(self, *, limit: int | None = None) -> bytes:
        """Its content, as `read_at` reads it. Raises OSError (FileTooLarge past `limit`)."""
        return read_at(self._folder, self._entry.name, limit=limit)[0]


class _Folder:
    __slots__ = ("fd", "pending")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending: Iterator[tuple[str, str, IgnoreRules | None, int]] = iter(())


def walk_files(
    root: Path,
    start: Path,
    *,
    build: bool = True,
    ignore: IgnoreRules | None = None,
    max_depth: int | None = None,
    ordered: bool = True,
) -> Generator[tuple[str, WalkedFile, bool]]:
    """Files under `start` (resolved, inside the resolved `root`) as (path relative to
    `root`, the file, ignored), folders in sorted order (or, with `ordered=False`, in the
    order the file system lists them, which holds no folder's listing in memory). Skips
    dependency folders (and build folders when `build`), symlinks (neither followed nor
    listed, as ripgrep does) and, when `ignore` is given, the folders that the ignore files
    exclude (those files are read as the walk descends); `ignored` says whether they exclude
    the file itself. `max_depth`: 1 yields only `start`'s own files.

    Every folder is opened relative to its parent's descriptor without following a symlink
    (`tether.daemon.beneath`), so a folder swapped for a symlink mid-walk is skipped, not
    entered; a start that cannot be reached yields nothing. One descriptor is open per level
    of the folder being walked (closing the iterator closes them), so folders
    `MAX_WALK_LEVELS` or more levels below `start` are not entered: a workspace nested deeper
    cannot run the daemon out of descriptors."""
    try:
        fd = folder_descriptor(root, start)
    except OSError:
        return
    stack = [_Folder(fd)]
    try:
        rel, rules, depth = relative(root, start), ignore, 1
        while True:
            subfolders = yield from _folder_files(fd, rel, rules, depth, build, max_depth, ordered)
            stack[-1].pending = iter(subfolders)
            while stack:
                parent = stack[-1]
                following = next(parent.pending, None)
                if following is None:
                    os.close(stack.pop().fd)
                    continue
                name, rel, rules, depth = following
                if len(stack) >= MAX_WALK_LEVELS:
                    continue
                try:
                    fd = open_subfolder(parent.fd, name)
                except OSError:  # gone, or swapped for a symlink: not entered
                    continue
                stack.append(_Folder(fd))
                if rules is not None:
                    rules = rules.child(fd, rel)
                break
            else:
                return
    finally:
        for folder in stack:
            os.close(folder.fd)


def _folder_files(
    fd: int,
    rel: str,
    rules: IgnoreRules | None,
    depth: int,
    build: bool,
    max_depth: int | None,
    ordered: bool,
) -> Generator[tuple[str, WalkedFile, bool], None, list[tuple[str, str, IgnoreRules | None, int]]]:
    """Yield the files of the folder open as `fd`; return its subfolders to walk, as (name,
    path, the parent's rules, depth)."""
    subfolders: list[tuple[str, str, IgnoreRules | None, int]] = []
    for entry in _entries(fd, ordered):
        path = join(rel, entry.name)
        try:
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            if is_skipped_dir(entry.name, build=build):
                continue
            if rules is not None and rules.ignored(path, True):
                continue
            if max_depth is None or depth < max_depth:
                subfolders.append((entry.name, path, rules, depth + 1))
        else:
            yield path, WalkedFile(fd, entry), rules is not None and rules.ignored(path, False)
    return subfolders


def _entries(folder: int, ordered: bool) -> Iterator[os.DirEntry[str]]:
    """A folder's entries; none (or those read so far) if it cannot be listed."""
    try:
        with os.scandir(folder) as it:
            if not ordered:
                yield from it
                return
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    yield from entries
