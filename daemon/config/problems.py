"""Saying exactly what is wrong with a config file: the file, the line and the setting.

TOML syntax errors carry their own line and column. A value that does not fit the settings
(msgspec's `ValidationError`) names the setting by its path (`$.provider.model`); the line is
then found by reading the file's tables and keys, and an unknown setting is answered with the
ones its table takes. The line is a best effort: a key the reader cannot place (inside a
multi-line value) is reported without one.
"""

import re
import tomllib
from pathlib import Path

import msgspec

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")
_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_TOML_AT = re.compile(r"^(?P<what>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")

KeyPath = tuple[str | int, ...]


def syntax_problem(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    """`<file>, line N, column M: <what tomllib says>`."""
    found = _TOML_AT.match(str(exc))
    if found is None:
        return f"{path}: {exc}"
    return f"{path}, line {found['line']}, column {found['column']}: {found['what']}"


def settings_problem(
    path: Path, text: str, exc: msgspec.ValidationError, schema: type[msgspec.Struct]
) -> str:
    """`<file>, line N: <setting>: <what is wrong>` for a file whose values do not fit
    `schema`; an unknown setting is told which settings its table takes."""
    found = _AT.match(str(exc))
    assert found is not None  # the pattern matches any text
    what, at = found["what"], _parse(found["path"] or "")
    unknown = _UNKNOWN.match(what)
    if unknown is not None:
        key = (*at, unknown["field"])
        known = _fields(schema, at)
        what = "unknown setting" + (f"; {_dotted(at) or 'the top level'} takes " if known else "")
        what += ", ".join(known)
    else:
        key = at
    line = find_line(text, key)
    where = f"{path}, line {line}" if line is not None else str(path)
    return f"{where}: {_dotted(key) or 'the file'}: {what}"


def find_line(text: str, key: KeyPath) -> int | None:
    """The 1-based line that sets `key` (a table header for a table), or the nearest line
    that sets a table or key containing it; None when no line does."""
    best: tuple[int, int] | None = None  # (matched length, line)
    table: list[str | int] = []
    counts: dict[tuple[str | int, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header is not None:
            parts: list[str | int] = list(_split_key(header[2]))
            if header[1] == "[[":
                index = counts.get(tuple(parts), 0)
                counts[tuple(parts)] = index + 1
                parts.append(index)
            table = parts
            here = tuple(table)
        else:
            assignment = _KEY.match(line)
            if assignment is None:
                continue
            here = (*table, *_split_key(assignment[1]))
        matched = _common(here, key)
        if matched == len(here) and (best is None or matched > best[0]):
            best = (matched, number)
            if matched == len(key):
                return number
    return None if best is None or best[0] == 0 else best[1]


def _split_key(text: str) -> list[str | int]:
    return [part.strip().strip("\"'") for part in text.split(".")]


def _common(a: KeyPath, b: KeyPath) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def _parse(text: str) -> KeyPath:
    return tuple(name if name else int(index) for name, index in _PART.findall(text))


def _dotted(key: KeyPath) -> str:
    out = ""
    for part in key:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _fields(schema: type[msgspec.Struct], at: KeyPath) -> list[str]:
    """The settings the table at `at` takes (none when `at` is not a table of `schema`)."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(schema)
    for part in at:
        if isinstance(part, int) and isinstance(info, msgspec.inspect.ListType):
            info = info.item_type
        elif isinstance(part, str) and isinstance(info, msgspec.inspect.StructType):
            field = next((f for f in info.fields if f.encode_name == part), None)
            if field is None:
                return []
            info = field.type
        else:
            return []
    if isinstance(info, msgspec.inspect.StructType):
        return [f.encode_name for f in info.fields]
    return []
