"""Questions about code, asked of a leased server (`LspPool.lease`): where a symbol is
defined, where it is used, what the file and the workspace declare, what a symbol's type is.

Positions come in as a 1-based line and either the symbol's name on that line (models count
columns badly) or a 1-based column in characters; they go to the server in the unit it counts
in (`positionEncoding`, UTF-16 unless it said otherwise). Answers come back as `Location`s with
absolute paths and 1-based lines; the servers' several shapes for one answer (`Location` or
`LocationLink`, `DocumentSymbol` or `SymbolInformation`, hover contents as markup or as
"marked strings") are all read.

Every function raises what `LspClient.request` raises (RequestTimeout, ResponseError,
ServerGone); cancellation withdraws the request.
"""

import re
from pathlib import Path
from typing import cast
from urllib.parse import unquote, urlparse

import msgspec

from tether.daemon.lsp.client import LspClient
from tether.daemon.lsp.pool import Lease
from tether.daemon.lsp.types import Position, Range

SYMBOL_KINDS = tuple(
    [
        "file",
        "module",
        "namespace",
        "package",
        "class",
        "method",
        "property",
        "field",
        "constructor",
        "enum",
        "interface",
        "function",
        "variable",
        "constant",
        "string",
        "number",
        "boolean",
        "array",
        "object",
        "key",
        "null",
        "enum-member",
        "struct",
        "event",
        "operator",
        "type-parameter",
    ]
)
"""LSP SymbolKind names, kind 1 first."""


class PositionError(ValueError):
    """The symbol or column given is not on the line given; the message says what is."""


class Location(msgspec.Struct, frozen=True, kw_only=True):
    path: Path
    line: int
    """1-based."""
    end_line: int


class Symbol(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kind: str
    location: Location | None
    container: str = ""
    depth: int = 0
    """Nesting in a file's outline (0: top level)."""


class _AnyLocation(msgspec.Struct, frozen=True, kw_only=True):
    """A `Location` or a `LocationLink`."""

    uri: str | None = None
    range: Range | None = None
    targetUri: str | None = None
    targetSelectionRange: Range | None = None


class _AnySymbol(msgspec.Struct, frozen=True, kw_only=True):
    """A `DocumentSymbol`, `SymbolInformation` or `WorkspaceSymbol`."""

    name: str
    kind: int
    containerName: str | None = None
    location: _AnyLocation | None = None
    range: Range | None = None
    selectionRange: Range | None = None
    children: "list[_AnySymbol]" = []


class _Hover(msgspec.Struct, frozen=True, kw_only=True):
    contents: object = None


# Answers that are one of several shapes, decoded from the raw result.
_LOCATIONS: msgspec.json.Decoder[list[_AnyLocation] | _AnyLocation | None] = msgspec.json.Decoder(
    list[_AnyLocation] | _AnyLocation | None
)
_SYMBOLS: msgspec.json.Decoder[list[_AnySymbol] | None] = msgspec.json.Decoder(
    list[_AnySymbol] | None
)
_HOVER: msgspec.json.Decoder[_Hover | None] = msgspec.json.Decoder(_Hover | None)


async def _ask(lease: Lease | LspClient, method: str, params: object) -> bytes:
    client = lease.client if isinstance(lease, Lease) else lease
    raw = await client.request(method, params, msgspec.Raw)
    return bytes(raw) or b"null"


def uri_to_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def position_of(
    text: str, line: int, symbol: str, column: int | None, encoding: str = "utf-16"
) -> Position:
    """The LSP position of `symbol` on 1-based `line` of `text` (its first occurrence as a
    whole word), or of 1-based `column` when given. Raises PositionError."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        raise PositionError(f"line {line} is past the end (the file has {len(lines)} lines)")
    content = lines[line - 1]
    if column is not None:
        if not 1 <= column <= len(content) + 1:
            raise PositionError(f"column {column} is past the end of line {line}: {content!r}")
        index = column - 1
    else:
        if not symbol:
            raise PositionError("give the symbol's name (or a column)")
        match = re.search(rf"(?<!\w){re.escape(symbol)}(?!\w)", content)
        index = match.start() if match else -1
        if index < 0:
            raise PositionError(f"{symbol!r} is not on line {line}: {content.strip()!r}")
    return Position(line=line - 1, character=_units(content[:index], encoding))


def _units(prefix: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(prefix.encode("utf-8"))
    if encoding == "utf-32":
        return len(prefix)
    return len(prefix.encode("utf-16-le")) // 2


def _document_position(lease: Lease, position: Position) -> dict[str, object]:
    return {
        "textDocument": {"uri": lease.uri},
        "position": {"line": position.line, "character": position.character},
    }


def _encoding(lease: Lease) -> str:
    return lease.client.capabilities.positionEncoding or "utf-16"


def lease_position(lease: Lease, line: int, symbol: str, column: int | None) -> Position:
    """`position_of` in the leased file, in its server's unit."""
    return position_of(lease.text, line, symbol, column, _encoding(lease))


async def definitions(
    lease: Lease, position: Position, *, kind: str = "definition"
) -> list[Location]:
    """Where the symbol at `position` is defined (`kind` "typeDefinition": where its type
    is)."""
    raw = await _ask(lease, f"textDocument/{kind}", _document_position(lease, position))
    return _locations(_LOCATIONS.decode(raw))


async def references(lease: Lease, position: Position) -> list[Location]:
    """Every use of the symbol at `position`, its declaration left out."""
    params = {**_document_position(lease, position), "context": {"includeDeclaration": False}}
    raw = await _ask(lease, "textDocument/references", params)
    return _locations(_LOCATIONS.decode(raw))


async def hover(lease: Lease, position: Position) -> str:
    """The server's hover text for `position` ("" when it has none)."""
    raw = _HOVER.decode(
        await _ask(lease, "textDocument/hover", _document_position(lease, position))
    )
    return "" if raw is None else _hover_text(raw.contents).strip()


async def document_symbols(lease: Lease) -> list[Symbol]:
    """The leased file's outline, in order, nested symbols after their parent."""
    raw = _SYMBOLS.decode(
        await _ask(lease, "textDocument/documentSymbol", {"textDocument": {"uri": lease.uri}})
    )
    out: list[Symbol] = []
    _flatten(raw or [], lease.path, 0, out)
    return out


async def workspace_symbols(client: LspClient, query: str) -> list[Symbol]:
    """The symbols of the server's project matching `query` (the server decides how: most
    match fuzzily)."""
    raw = _SYMBOLS.decode(await _ask(client, "workspace/symbol", {"query": query}))
    return [_symbol(item, None, 0) for item in raw or []]


def _flatten(items: list[_AnySymbol], path: Path, depth: int, out: list[Symbol]) -> None:
    for item in items:
        out.append(_symbol(item, path, depth))
        _flatten(item.children, path, depth + 1, out)


def _symbol(item: _AnySymbol, path: Path | None, depth: int) -> Symbol:
    """`item` as a Symbol; `path`: the file of an outline (whose symbols carry only a range)."""
    location: Location | None = None
    if item.range is not None and path is not None:
        start, end = item.range.start.line + 1, item.range.end.line + 1
        location = Location(path=path, line=start, end_line=end)
    elif item.location is not None:
        location = _location(item.location)
    return Symbol(
        name=item.name,
        kind=_kind(item.kind),
        location=location,
        container=item.containerName or "",
        depth=depth,
    )


def _kind(kind: int) -> str:
    return SYMBOL_KINDS[kind - 1] if 1 <= kind <= len(SYMBOL_KINDS) else "symbol"


def _locations(raw: _AnyLocation | list[_AnyLocation] | None) -> list[Location]:
    items = [raw] if isinstance(raw, _AnyLocation) else raw or []
    found = [location for item in items if (location := _location(item)) is not None]
    return sorted(dict.fromkeys(found), key=lambda loc: (str(loc.path), loc.line))


def _location(item: _AnyLocation) -> Location | None:
    uri = item.targetUri or item.uri
    where = item.targetSelectionRange or item.range
    path = uri_to_path(uri) if uri else None
    if path is None:
        return None
    if where is None:
        return Location(path=path, line=0, end_line=0)
    return Location(path=path, line=where.start.line + 1, end_line=where.end.line + 1)


def _hover_text(contents: object) -> str:
    """Markup content, a marked string (a string, or `{language, value}`), or a list of them."""
    if isinstance(contents, str):
        return contents
    if isinstance(contents, list):
        parts = cast("list[object]", contents)
        return "\n\n".join(_hover_text(part) for part in parts)
    if isinstance(contents, dict):
        value = contents.get("value")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        language = contents.get("language")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(value, str):
            return f"```{language}\n{value}\n```" if isinstance(language, str) else value
    return ""


class TextEdit(msgspec.Struct, frozen=True, kw_only=True):
    range: Range
    newText: str


class _DocumentId(msgspec.Struct, frozen=True, kw_only=True):
    uri: str


class _DocumentChange(msgspec.Struct, frozen=True, kw_only=True):
    """A `TextDocumentEdit`, or a file operation (`kind`: create, rename, delete)."""

    kind: str | None = None
    textDocument: _DocumentId | None = None
    edits: list[TextEdit] = []


class _WorkspaceEdit(msgspec.Struct, frozen=True, kw_only=True):
    changes: dict[str, list[TextEdit]] | None = None
    documentChanges: list[_DocumentChange] | None = None


_RENAME: msgspec.json.Decoder[_WorkspaceEdit | None] = msgspec.json.Decoder(_WorkspaceEdit | None)


class RenameRefused(ValueError):
    """The server's rename is one tether does not apply (it creates, renames or deletes
    files, or names a document that is not a file)."""


async def rename(lease: Lease, position: Position, new_name: str) -> dict[Path, list[TextEdit]]:
    """The server's edits renaming the symbol at `position` to `new_name`, by file ({} when
    it has none). Raises RenameRefused for edits that do more than change text in files."""
    params = {**_document_position(lease, position), "newName": new_name}
    raw = _RENAME.decode(await _ask(lease, "textDocument/rename", params))
    by_uri: dict[str, list[TextEdit]] = {}
    if raw is not None and raw.documentChanges is not None:
        for change in raw.documentChanges:
            if change.kind is not None or change.textDocument is None:
                raise RenameRefused(f"the rename would {change.kind or 'change'} files")
            by_uri.setdefault(change.textDocument.uri, []).extend(change.edits)
    elif raw is not None and raw.changes is not None:
        by_uri = raw.changes
    out: dict[Path, list[TextEdit]] = {}
    for uri, edits in by_uri.items():
        path = uri_to_path(uri)
        if path is None:
            raise RenameRefused(f"the rename would change {uri}, which is not a file")
        out.setdefault(path, []).extend(edits)
    return out


def apply_edits(text: str, edits: list[TextEdit], encoding: str = "utf-16") -> str:
    """`text` with `edits` (non-overlapping, positions in `encoding` units) applied. Raises
    ValueError for a position past the text's end or edits that overlap."""
    out: list[str] = []
    at = 0
    for start, end, new in _spans(text, edits, encoding):
        out += [text[at:start], new]
        at = end
    out.append(text[at:])
    return "".join(out)


def replaced_texts(text: str, edits: list[TextEdit], encoding: str = "utf-16") -> list[str]:
    """What each of `edits` would replace in `text`, in order. Raises as `apply_edits`."""
    return [text[start:end] for start, end, _ in _spans(text, edits, encoding)]


def _spans(text: str, edits: list[TextEdit], encoding: str) -> list[tuple[int, int, str]]:
    """(start, end, new text) of each edit as indices in `text`, in order, checked."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: Position) -> int:
        if position.line == len(lines) and position.character == 0:
            return len(text)
        if not 0 <= position.line < len(lines):
            raise ValueError(f"line {position.line + 1} is past the end")
        content = lines[position.line].rstrip("\r\n")
        return starts[position.line] + _index_of(content, position.character, encoding)

    spans = sorted((offset(e.range.start), offset(e.range.end), e.newText) for e in edits)
    at = 0
    for start, end, _ in spans:
        if start < at or end < start:
            raise ValueError("the edits overlap")
        at = end
    return spans


def _index_of(line: str, units: int, encoding: str) -> int:
    """The index in `line` of the character `units` code units in (its end when past it)."""
    if encoding == "utf-32":
        return min(units, len(line))
    counted = 0
    for index, char in enumerate(line):
        if counted >= units:
            return index
        if encoding == "utf-8":
            counted += len(char.encode("utf-8"))
        else:
            counted += 2 if ord(char) > 0xFFFF else 1
    return len(line)


def lease_encoding(lease: Lease) -> str:
    """The unit the leased server counts columns in."""
    return _encoding(lease)
