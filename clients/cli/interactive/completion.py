"""Completion at the interactive prompt: slash commands and their arguments, and `@path`
mentions of the workspace's files and folders."""

import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from tether.clients.cli.interactive.slash import COMMANDS

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".tox",
        "dist",
        "build",
        "target",
    }
)
"""Folders whose contents are not offered (dependencies, caches, build output)."""

MAX_PATHS = 20_000
"""Paths listed at most; a larger tree is offered in part (the walk is breadth-first)."""

MAX_SHOWN = 50
LISTING_TTL_S = 5.0


class WorkspaceFiles:
    """The workspace's files and folders (relative, folders ending in `/`), listed
    breadth-first without the `SKIPPED_DIRS`, at most `MAX_PATHS`; kept for `LISTING_TTL_S`
    seconds so that completing as one types does not walk the tree at every key."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._clock = clock
        self._listed_at: float | None = None
        self._paths: list[str] = []

    def paths(self) -> list[str]:
        now = self._clock()
        if self._listed_at is None or now - self._listed_at > LISTING_TTL_S:
            self._paths = self._walk()
            self._listed_at = now
        return self._paths

    def _walk(self) -> list[str]:
        found: list[str] = []
        folders = [""]
        while folders and len(found) < MAX_PATHS:
            folder = folders.pop(0)
            try:
                entries = sorted(os.scandir(self.root / folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                path = f"{folder}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in SKIPPED_DIRS:
                        continue
                    folders.append(path + "/")
                    found.append(path + "/")
                else:
                    found.append(path)
        return found[:MAX_PATHS]


def matching_paths(paths: Iterable[str], fragment: str) -> list[str]:
    """Paths that start with `fragment`, then those whose file name starts with it, then
    those containing it anywhere (case-insensitive), `MAX_SHOWN` at most."""
    wanted = fragment.lower()
    first: list[str] = []
    named: list[str] = []
    inside: list[str] = []
    for path in paths:
        lowered = path.lower()
        if lowered.startswith(wanted):
            first.append(path)
        elif lowered.rstrip("/").rsplit("/", 1)[-1].startswith(wanted):
            named.append(path)
        elif wanted in lowered:
            inside.append(path)
        if len(first) >= MAX_SHOWN:
            break
    return (first + named + inside)[:MAX_SHOWN]


def _quoted(path: str) -> str:
    return f'"{path}"' if any(ch.isspace() for ch in path) else path


class ChatCompleter(Completer):
    """Slash command names (at the start of the input), the arguments of `/model`, `/mode`
    and `/attach` (from `arguments(command)`), and `@path` anywhere."""

    def __init__(self, files: WorkspaceFiles, arguments: Callable[[str], list[str]]) -> None:
        self.files = files
        self.arguments = arguments

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/"):
            name, space, typed = before.partition(" ")
            if not space:
                for command in COMMANDS:
                    if command.name.startswith(name):
                        yield Completion(command.name, -len(name), display_meta=command.summary)
                return
            if " " not in typed:
                for value in self.arguments(name):
                    if value.startswith(typed):
                        yield Completion(value, -len(typed))
                return
        word = before.split()[-1] if before and not before[-1].isspace() else ""
        if word.startswith("@") and '"' not in word:
            fragment = word[1:]
            for path in matching_paths(self.files.paths(), fragment):
                yield Completion("@" + _quoted(path), -len(word), display=path)
