"""glob: files whose path matches a pattern, newest first.

The walk streams: only the newest MAX_RESULTS matches are kept (a heap) and the others are
counted, so memory stays flat however many files match. Credential-like files are left out
unless the path or pattern names them (`names_credentials`; the permission gate then asks).
"""

import heapq
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolved_and_shown,
)
from tether.daemon.tools.credentials import is_credential_path, names_credentials
from tether.daemon.tools.filetree import glob_regex, relative, walk_files

MAX_RESULTS = 200
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
        "asks the user first."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = GlobParams

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
        return await trio.to_thread.run_sync(_glob, root, start, params.pattern, shown, hide)


def _glob(root: Path, start: Path, pattern: str, shown: str, hide_credentials: bool) -> str:
    segments = pattern.removeprefix("./").split("/")
    # Descend straight into the literal folders the pattern starts with.
    literal: list[str] = []
    while len(segments) > 1 and not _WILDCARDS & set(segments[0]) and segments[0] != "**":
        literal.append(segments.pop(0))
    base = start.joinpath(*literal).resolve()
    if not base.is_dir() or (base != root and root not in base.parents):
        return _none(pattern, shown)
    rest = "/".join(segments)
    regex = glob_regex(rest)
    base_rel = relative(root, base)
    cut = len(base_rel) + 1 if base_rel else 0
    depth = None if "**" in rest else len(segments)
    total = 0

    def matching() -> Iterator[tuple[int, str]]:
        nonlocal total
        for rel, entry, _ in walk_files(root, base, max_depth=depth, ordered=False):
            if regex.match(rel[cut:]) is None:
                continue
            if hide_credentials and is_credential_path(rel):
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except OSError:
                continue
            total += 1
            yield -mtime, rel

    newest = heapq.nsmallest(MAX_RESULTS, matching())  # newest first, then by path
    if not newest:
        return _none(pattern, shown)
    lines = [rel for _, rel in newest]
    if total > MAX_RESULTS:
        lines.append(
            f"({total - MAX_RESULTS} more matches not shown: {total} in all. "
            "Use a narrower pattern or path.)"
        )
    return "\n".join(lines)


def _none(pattern: str, shown: str) -> str:
    return f"No files match {pattern!r} in {'the workspace' if shown == '.' else shown}."
