"""Walking the workspace: which folders are skipped, glob patterns, and ignore files.

Glob syntax (as in ripgrep's `--glob` and `.gitignore`): `*` and `?` stay within one path
segment, `**` spans folders (`**/x`, `a/**/b`, `a/**`), `[abc]`/`[!abc]` are classes and
`{a,b}` alternatives; `pathglob` matches them in bounded time. A gitignore-style pattern
without a `/` (other than a trailing one) matches a name at any depth; with one, it is
anchored to the folder of its ignore file (or to the workspace, for a `--glob`).
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

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

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
"""Read in this order in every folder (a later file wins), as ripgrep does."""


def folder_entries(folder: Path) -> tuple[list[str], list[str]]:
    """One level of `folder`, named as list_dir shows them (folders end in `/`): the entries,
    and apart the dependency folders among them (`DEPENDENCY_DIRS`), both unsorted. An entry
    whose kind cannot be read counts as a file. Raises OSError when `folder` cannot be read."""
    names: list[str] = []
    dependencies: list[str] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir and entry.name in DEPENDENCY_DIRS:
                dependencies.append(entry.name + "/")
            else:
                names.append(entry.name + "/" if is_dir else entry.name)
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

    def child(self, folder: Path, rel: str) -> "IgnoreRules":
        """The rules for subfolder `folder` (at `rel` from the root): these plus its files."""
        patterns: list[GitignorePattern] = []
        for name in IGNORE_FILES:
            try:
                text = (folder / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            patterns.extend(parse_ignore_file(text))
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
    """The ignore rules in force in `folder` (inside `root`): `.git/info/exclude` and the
    ignore files of `root` and of every folder down to `folder`."""
    rules = IgnoreRules()
    exclude = root / ".git" / "info" / "exclude"
    with contextlib.suppress(OSError):
        rules = rules.with_patterns("", parse_ignore_file(exclude.read_text(errors="replace")))
    rules = rules.child(root, "")
    current = root
    for part in folder.relative_to(root).parts:
        current = current / part
        rules = rules.child(current, current.relative_to(root).as_posix())
    return rules


def relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel


def join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def walk_files(
    root: Path,
    start: Path,
    *,
    build: bool = True,
    ignore: IgnoreRules | None = None,
    max_depth: int | None = None,
    ordered: bool = True,
) -> Iterator[tuple[str, os.DirEntry[str], bool]]:
    """Files under `start` as (path relative to `root`, entry, ignored), folders in sorted
    order (or, with `ordered=False`, in the order the file system lists them, which holds no
    folder's listing in memory). Skips dependency folders (and build folders when `build`),
    symlinks (neither followed nor listed, as ripgrep does) and, when `ignore` is given, the
    folders that the ignore files exclude (those files are read as the walk descends);
    `ignored` says whether they exclude the file itself. `max_depth`: 1 yields only `start`'s
    own files."""
    stack: list[tuple[Path, str, IgnoreRules | None, int]] = [
        (start, relative(root, start), ignore, 1)
    ]
    while stack:
        folder, rel, rules, depth = stack.pop()
        subfolders: list[tuple[Path, str, IgnoreRules | None, int]] = []
        for entry in _entries(folder, ordered):
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
                    child_rules = rules.child(Path(entry.path), path) if rules else None
                    subfolders.append((Path(entry.path), path, child_rules, depth + 1))
            else:
                yield path, entry, rules is not None and rules.ignored(path, False)
        stack.extend(reversed(subfolders))


def _entries(folder: Path, ordered: bool) -> Iterator[os.DirEntry[str]]:
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
