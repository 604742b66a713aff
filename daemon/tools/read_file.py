"""read_file: a text file with line numbers, a window of it at a time."""

import errno
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.beneath import FileTooLarge, read_beneath
from tether.daemon.tools.base import (
    FileVersion,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolve_in_workspace,
)
from tether.daemon.tools.binary import is_binary

DEFAULT_LIMIT = 1000
MAX_LINE_CHARS = 1500
MAX_FILE_BYTES = 10 * 1024 * 1024


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
        f"{DEFAULT_LIMIT} lines per call (use offset/limit for more; a footer gives the range "
        f"shown and the total); lines longer than {MAX_LINE_CHARS} characters are cut. Binary "
        "files and files over 10 MB are refused. Read a file before editing or overwriting it."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = ReadFileParams

    async def run(self, params: ReadFileParams, ctx: ToolContext) -> str:
        path = resolve_in_workspace(ctx.workspace, params.path)
        root = ctx.workspace.resolve()
        text, version = await trio.to_thread.run_sync(_read, root, path, params)
        ctx.versions.record(path, version)
        return text


def _read(root: Path, path: Path, params: ReadFileParams) -> tuple[str, FileVersion]:
    """The file rendered, read beneath `root` without following a symlink (a path that a
    symlink interrupts since it was checked is refused, never followed)."""
    try:
        data, status = read_beneath(root, path, limit=MAX_FILE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolFailure(
            f"{params.path} does not exist. Use glob (e.g. `**/{path.name}`) or list_dir to "
            "find the file."
        ) from None
    except IsADirectoryError:
        raise ToolFailure(f"{params.path} is a directory; use list_dir for directories.") from None
    except FileTooLarge as exc:
        raise ToolFailure(
            f"{params.path} is {exc.size:,} bytes; files over 10 MB are not read. "
            "Use grep to search it instead."
        ) from None
    except OSError as exc:
        raise ToolFailure(_refusal(params.path, exc)) from exc
    if is_binary(data):
        raise ToolFailure(f"{params.path} looks like a binary file; it was not read.")
    return _render(data, params), FileVersion.of_status(status, data)


def _refusal(shown: str, exc: OSError) -> str:
    if exc.errno == errno.EFBIG:
        return (
            f"{shown} is over 10 MB; files over 10 MB are not read. Use grep to search it instead."
        )
    if exc.errno == errno.EINVAL:
        return f"{shown} is not a regular file; it was not read."
    if exc.errno == errno.ELOOP:
        return (
            f"{shown} changed while it was being read (a symlink took the place of a folder "
            "or the file); it was not read."
        )
    return f"Could not read {shown}: {exc}."


def _render(data: bytes, params: ReadFileParams) -> str:
    lines = split_lines(data.decode("utf-8", errors="replace"))
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
        more = f"; continue with offset={end + 1}" if end < total else ""
        out.append(f"(lines {start + 1}-{end} of {total}{more})")
    return "\n".join(out)


def split_lines(text: str) -> list[str]:
    """Lines as grep numbers them: split on `\\n` only, a `\\r` before it dropped."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
