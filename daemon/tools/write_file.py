"""write_file: create a file, or replace all of one the agent has read."""

from typing import Annotated, ClassVar

import msgspec

from tether.daemon.tools.base import ToolParams
from tether.daemon.tools.edits import (
    FileEditTool,
    FileParams,
    FilePlan,
    FileTarget,
    check_guard,
    decode,
    encode,
    line_delta,
    plural,
    read_current,
)


class WriteFileParams(FileParams, frozen=True, kw_only=True):
    content: Annotated[str, msgspec.Meta(description="The complete new content of the file.")]


class WriteFile(FileEditTool[WriteFileParams]):
    name: ClassVar[str] = "write_file"
    description: ClassVar[str] = (
        "Write a whole file: creates it (and missing folders) or replaces all of its content. "
        "Overwriting an existing file needs an up-to-date read_file of it first. Prefer "
        "edit_file for changing part of a file."
    )
    params: ClassVar[type[ToolParams]] = WriteFileParams

    def plan_file(self, params: WriteFileParams, file: FileTarget) -> FilePlan:
        shown = file.shown
        before = _current(file)
        after = encode(params.content)
        lines = plural(len(params.content.splitlines()), "line")
        if before is None:
            summary = f"Created {shown} ({lines})."
        elif before == after:
            summary = f"Wrote {shown} ({lines}; the content was already the same)."
        else:
            added, removed = line_delta(decode(before), params.content)
            summary = f"Wrote {shown} ({lines}; +{added} -{removed} lines)."
        return FilePlan(file.path, shown, before, after, summary)


def _current(file: FileTarget) -> bytes | None:
    """The file's content (None: no file), after checking the guard."""
    data = read_current(file.root, file.path, file.shown)
    if data is not None:
        check_guard(file.shown, data, file.seen)
    return data
