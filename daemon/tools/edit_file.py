"""edit_file: replace an exact piece of a file.

Matching is exact, with one tolerance: line endings. `new_string` takes the file's dominant
line ending, and an `old_string` that is not found as given is tried again with the file's
line endings. On a miss the hint names the lines where the first line of `old_string` nearly
matches (equal once whitespace is ignored, or contained, or very similar), which is almost
always an indentation or stale-read problem the model can fix by reading those lines again.
"""

import difflib
import re
from typing import Annotated, ClassVar

import msgspec

from tether.daemon.tools.base import ToolFailure, ToolParams
from tether.daemon.tools.binary import is_binary
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
from tether.daemon.tools.read_file import split_lines

MAX_HINTS = 5
FUZZY_CUTOFF = 0.8
FUZZY_MAX_LINES = 20_000
_WHITESPACE = re.compile(r"\s+")


class EditFileParams(FileParams, frozen=True, kw_only=True):
    old_string: Annotated[
        str,
        msgspec.Meta(
            description="The exact text to replace, copied from the file (whitespace included). "
            "It must occur exactly once unless replace_all is true."
        ),
    ]
    new_string: Annotated[str, msgspec.Meta(description="The text to put in its place.")]
    replace_all: Annotated[
        bool, msgspec.Meta(description="Replace every occurrence. Default false.")
    ] = False


class EditFile(FileEditTool[EditFileParams]):
    name: ClassVar[str] = "edit_file"
    description: ClassVar[str] = (
        "Replace old_string with new_string in a file. old_string must match the file exactly "
        "(copy it from read_file output, without the line-number prefix) and be unique unless "
        "replace_all is true; line endings (CRLF/LF) are matched either way. The file must have "
        "been read with read_file first, and not changed since (re-read it if it has); "
        "your own edits keep it current. To create a file use write_file."
    )
    params: ClassVar[type[ToolParams]] = EditFileParams

    def plan_file(self, params: EditFileParams, file: FileTarget) -> FilePlan:
        if params.old_string == "":
            raise ToolFailure(
                "old_string is empty. To create a file or replace all of its content, use "
                "write_file."
            )
        if params.old_string == params.new_string:
            raise ToolFailure(
                "old_string and new_string are identical; there is nothing to change."
            )
        return _plan_edit(file, params)


def _plan_edit(file: FileTarget, params: EditFileParams) -> FilePlan:
    shown = file.shown
    before = read_current(file.root, file.path, shown)
    if before is None:
        raise ToolFailure(
            f"{shown} does not exist. Use write_file to create it, or glob to find the right path."
        )
    if is_binary(before):
        raise ToolFailure(f"{shown} looks like a binary file; edit_file changes text files only.")
    check_guard(shown, before, file.seen)
    text = decode(before)
    ending = _line_ending(text)
    old = params.old_string
    new = _with_ending(params.new_string, ending)
    count = text.count(old)
    if count == 0:
        converted = _with_ending(old, ending)
        if converted != old:
            old = converted
            count = text.count(old)
    if count == 0:
        raise ToolFailure(_miss_message(shown, text, params.old_string))
    lines = _occurrence_lines(text, old)
    if count > 1 and not params.replace_all:
        raise ToolFailure(
            f"old_string occurs {count} times in {shown} (lines {_join(lines)}). Include more "
            "of the surrounding text to make it unique, or set replace_all to replace every "
            "occurrence."
        )
    after_text = text.replace(old, new)
    added, removed = line_delta(old, new)
    summary = (
        f"Edited {shown}: replaced {plural(count, 'occurrence')} at "
        f"{'line' if count == 1 else 'lines'} {_join(lines)} "
        f"(+{added * count} -{removed * count} lines)."
    )
    return FilePlan(file.path, shown, before, encode(after_text), summary)


def _line_ending(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf > text.count("\n") - crlf else "\n"


def _with_ending(text: str, ending: str) -> str:
    text = text.replace("\r\n", "\n")
    return text.replace("\n", ending) if ending != "\n" else text


def _occurrence_lines(text: str, needle: str) -> list[int]:
    lines: list[int] = []
    position = text.find(needle)
    line = 1
    last = 0
    while position != -1:
        line += text.count("\n", last, position)
        last = position
        lines.append(line)
        position = text.find(needle, position + len(needle))
    return lines


def _join(numbers: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f", … ({len(numbers) - limit} more)" if len(numbers) > limit else "")


def _squash(text: str) -> str:
    return _WHITESPACE.sub("", text)


def near_miss_lines(text: str, old_string: str) -> list[int]:
    """Line numbers (1-based) where the first non-blank line of `old_string` nearly matches:
    equal ignoring whitespace; else containing it ignoring whitespace; else similar."""
    first = next((line for line in old_string.splitlines() if line.strip()), "")
    key = _squash(first)
    if not key:
        return []
    squashed = [_squash(line) for line in split_lines(text)]
    equal = [i for i, line in enumerate(squashed, 1) if line == key]
    if equal:
        return equal[:MAX_HINTS]
    containing = [i for i, line in enumerate(squashed, 1) if line and key in line]
    if containing:
        return containing[:MAX_HINTS]
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(key)
    similar: list[tuple[float, int]] = []
    for i, line in enumerate(squashed[:FUZZY_MAX_LINES], 1):
        if not line:
            continue
        matcher.set_seq1(line)
        if (
            matcher.real_quick_ratio() >= FUZZY_CUTOFF
            and matcher.quick_ratio() >= FUZZY_CUTOFF
            and matcher.ratio() >= FUZZY_CUTOFF
        ):
            similar.append((matcher.ratio(), i))
    similar.sort(key=lambda pair: (-pair[0], pair[1]))
    return sorted(i for _, i in similar[:MAX_HINTS])


def _miss_message(shown: str, text: str, old_string: str) -> str:
    hints = near_miss_lines(text, old_string)
    if hints:
        where = f"line {hints[0]}" if len(hints) == 1 else f"lines {_join(hints)}"
        return (
            f"old_string was not found in {shown}. Its first line nearly matches {where} "
            "(whitespace or small differences). Read those lines again with read_file and "
            "copy the text exactly, including indentation."
        )
    return (
        f"old_string was not found in {shown}, not even approximately. Read the file again "
        "with read_file and copy the exact text to replace."
    )
