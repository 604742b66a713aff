"""write_file: create a file, or replace all of one the agent has read."""

from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.tools.base import (
    FileVersion,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolOutput,
    ToolParams,
)
from tether.daemon.tools.edits import (
    check_guard,
    decode,
    encode,
    line_delta,
    plural,
    target,
    unified_diff,
    write_guarded,
)


class WriteFileParams(ToolParams, frozen=True, kw_only=True):
    path: Annotated[str, msgspec.Meta(description="File path, relative to the workspace root.")]
    content: Annotated[str, msgspec.Meta(description="The complete new content of the file.")]


class WriteFile:
    name: ClassVar[str] = "write_file"
    description: ClassVar[str] = (
        "Write a whole file: creates it (and missing folders) or replaces all of its content. "
        "Overwriting an existing file needs an up-to-date read_file of it first. Prefer "
        "edit_file for changing part of a file."
    )
    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]] = WriteFileParams

    def target_path(self, params: ToolParams) -> str:
        assert isinstance(params, WriteFileParams)
        return params.path

    async def preview(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, WriteFileParams)
        path, shown = target(ctx, params.path)
        before = await trio.to_thread.run_sync(_current, path, shown, ctx.versions.get(path))
        return unified_diff(shown, before, encode(params.content))

    async def run(self, params: ToolParams, ctx: ToolContext) -> ToolOutput:
        assert isinstance(params, WriteFileParams)
        path, shown = target(ctx, params.path)
        before = await trio.to_thread.run_sync(_current, path, shown, ctx.versions.get(path))
        after = encode(params.content)
        diff = await write_guarded(ctx, path, shown, before, after)
        lines = plural(len(params.content.splitlines()), "line")
        if before is None:
            return ToolOutput(text=f"Created {shown} ({lines}).", diff=diff)
        if before == after:
            return ToolOutput(text=f"Wrote {shown} ({lines}; the content was already the same).")
        added, removed = line_delta(decode(before), params.content)
        return ToolOutput(text=f"Wrote {shown} ({lines}; +{added} -{removed} lines).", diff=diff)


def _current(path: Path, shown: str, seen: FileVersion | None) -> bytes | None:
    """The file's content (None: no file), after checking the guard."""
    if path.is_dir():
        raise ToolFailure(f"{shown} is a directory.")
    if not path.exists():
        return None
    if not path.is_file():
        raise ToolFailure(f"{shown} is not a regular file.")
    data = path.read_bytes()
    check_guard(shown, data, seen)
    return data
