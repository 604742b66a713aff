"""read_file: a text file with line numbers, a window of it at a time."""

from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolve_in_workspace,
)

DEFAULT_LIMIT = 1000
MAX_LINE_CHARS = 1500
MAX_FILE_BYTES = 10 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192


class ReadFileParams(ToolParams, frozen=True, kw_only=True):
    path: Annotated[str, msgspec.Meta(description="File path, relative to the workspace root.")]
    offset: Annotated[
        int, msgspec.Meta(ge=1, description="First line to show (1-based). Default 1.")
    ] = 1
    limit: Annotated[
        int, msgspec.Meta(ge=1, description=f"Number of lines to show. Default {DEFAULT_LIMIT}.")
    ] = DEFAULT_LIMIT


class ReadFile:
    name: ClassVar[str] = "read_file"
    description: ClassVar[str] = (
        "Read a text file. Output is line-numbered (`N<TAB>line`), at most "
        f"{DEFAULT_LIMIT} lines per call (use offset/limit for more); lines longer than "
        f"{MAX_LINE_CHARS} characters are cut. Binary files and files over 10 MB are refused."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = ReadFileParams

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, ReadFileParams)
        path = resolve_in_workspace(ctx.workspace, params.path)
        return await trio.to_thread.run_sync(_read, path, params)


def _read(path: Path, params: ReadFileParams) -> str:
    if not path.exists():
        raise ToolFailure(f"{params.path} does not exist. Use glob or list_dir to find files.")
    if path.is_dir():
        raise ToolFailure(f"{params.path} is a directory; use list_dir for directories.")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolFailure(f"{params.path} is {size} bytes; files over 10 MB are not read.")
    data = path.read_bytes()
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolFailure(f"{params.path} looks like a binary file; it was not read.")
    lines = data.decode("utf-8", errors="replace").splitlines()
    total = len(lines)
    start = params.offset - 1
    window = lines[start : start + params.limit]
    out: list[str] = []
    for number, line in enumerate(window, start=params.offset):
        shown = line
        if len(line) > MAX_LINE_CHARS:
            shown = f"{line[:MAX_LINE_CHARS]}… [line cut at {MAX_LINE_CHARS} characters]"
        out.append(f"{number}\t{shown}")
    if total == 0:
        return f"{params.path} is empty."
    if start >= total:
        return f"{params.path} has {total} lines; offset {params.offset} is past the end."
    end = start + len(window)
    if start > 0 or end < total:
        out.append(f"(lines {start + 1}-{end} of {total})")
    return "\n".join(out)
