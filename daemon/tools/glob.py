"""glob: files whose path matches a pattern, newest first.

The walk streams: only the newest MAX_RESULTS matches are kept (a heap) and the others are
counted, so memory stays flat however many files match. Credential-like files are left out
unless the path or pattern names them (`names_credentials`; the permission gate then asks).

The pattern is matched in bounded time (`pathglob`). The walk stops after `time_limit`
seconds with what it found so far, and a cancelled call returns at once: its worker thread is
abandoned and told to stop, which it does at the next entry.
"""

import heapq
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.pathglob import GlobError, compile_glob
from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolved_and_shown,
)
from tether.daemon.tools.credentials import is_credential_path, names_credentials
from tether.daemon.tools.filetree import relative, walk_files

MAX_RESULTS = 200
TIME_LIMIT_SECONDS = 30.0
_WILDCARDS = set("*?[{")


class GlobParams(ToolParams, frozen=True, kw_only=True):
    pattern: Annotated[
        str,
        msgspec.Meta(
            description="Glob matched against paths relative to `path`: `*` stays within a "
            "folder, `**/` spans folders, `{a,b}` alternatives. E.g. `**/*.py`, "
            "`src/**/*.{ts,tsx}`, `*.md` (top level only)."
        ),
    ]
    path: Annotated[
        str,
        msgspec.Meta(description="Folder to search in, relative to the workspace. Default '.'."),
    ] = "."


class Glob:
    name: ClassVar[str] = "glob"
    description: ClassVar[str] = (
        "Find files by path pattern (e.g. `**/*.py`). Returns paths relative to the workspace, "
        f"most recently modified first, at most {MAX_RESULTS} (a note says how many more "
        "matched). Skips dependency and build folders (node_modules, .git, .venv, venv, "
        "__pycache__, dist, build, target, …); symlinks are not followed. Credential-like "
        "files (.env, keys, .ssh/…) are left out unless the pattern or path names them, which "
        f"asks the user first. Stops after {TIME_LIMIT_SECONDS:g} s with what it found."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = GlobParams

    def __init__(self, *, time_limit: float = TIME_LIMIT_SECONDS) -> None:
        self.time_limit = time_limit

    def file_glob(self, params: GlobParams) -> str:
        return params.pattern

    async def run(self, params: GlobParams, ctx: ToolContext) -> str:
        if not params.pattern.strip():
            raise ToolFailure("The pattern is empty; try `**/*` or `**/*.py`.")
        root = ctx.workspace.resolve()
        start, shown = resolved_and_shown(ctx.workspace, params.path)
        if not start.is_dir():
            raise ToolFailure(f"{params.path} is not a folder.")
        hide = not names_credentials(relative(root, start), params.pattern)
        try:
            compile_glob(params.pattern.removeprefix("./"))
        except GlobError as exc:
            raise ToolFailure(f"{exc}. Use a simpler pattern.") from None
        stop = threading.Event()
        walk = _Walk(root, start, params.pattern, shown, hide, self.time_limit, stop)
        try:
            return await trio.to_thread.run_sync(walk.run, abandon_on_cancel=True)
        finally:
            stop.set()


class _Walk:
    """One glob call's walk, run in a worker thread; it stops at `time_limit` seconds or when
    `stop` is set."""

    def __init__(
        self,
        root: Path,
        start: Path,
        pattern: str,
        shown: str,
        hide_credentials: bool,
        time_limit: float,
        stop: threading.Event,
    ) -> None:
        self.root, self.start, self.pattern, self.shown = root, start, pattern, shown
        self.hide_credentials = hide_credentials
        self.time_limit = time_limit
        self.stop = stop
        self.stopped = False

    def run(self) -> str:
        root, pattern, shown = self.root, self.pattern, self.shown
        segments = pattern.removeprefix("./").split("/")
        # Descend straight into the literal folders the pattern starts with.
        literal: list[str] = []
        while len(segments) > 1 and not _WILDCARDS & set(segments[0]) and segments[0] != "**":
            literal.append(segments.pop(0))
        base = self.start.joinpath(*literal).resolve()
        if not base.is_dir() or (base != root and root not in base.parents):
            return _none(pattern, shown)
        rest = "/".join(segments)
        glob = compile_glob(rest)
        base_rel = relative(root, base)
        cut = len(base_rel) + 1 if base_rel else 0
        depth = None if "**" in rest else len(segments)
        deadline = time.monotonic() + self.time_limit
        total = 0

        def matching() -> Iterator[tuple[int, str]]:
            nonlocal total
            for rel, file, _ in walk_files(root, base, max_depth=depth, ordered=False):
                if self.stop.is_set() or time.monotonic() > deadline:
                    self.stopped = True
                    return
                if not glob.match(rel[cut:]):
                    continue
                if self.hide_credentials and is_credential_path(rel):
                    continue
                try:
                    mtime = file.stat().st_mtime_ns
                except OSError:
                    continue
                total += 1
                yield -mtime, rel

        newest = heapq.nsmallest(MAX_RESULTS, matching())  # newest first, then by path
        stopped = (
            f"(The walk stopped after {self.time_limit:g} s; these are the matches found so "
            "far. Use a narrower pattern or path.)"
        )
        if not newest:
            return f"{_none(pattern, shown)}\n{stopped}" if self.stopped else _none(pattern, shown)
        lines = [rel for _, rel in newest]
        if total > MAX_RESULTS:
            lines.append(
                f"({total - MAX_RESULTS} more matches not shown: {total} in all. "
                "Use a narrower pattern or path.)"
            )
        if self.stopped:
            lines.append(stopped)
        return "\n".join(lines)


def _none(pattern: str, shown: str) -> str:
    return f"No files match {pattern!r} in {'the workspace' if shown == '.' else shown}."
