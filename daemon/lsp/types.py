"""The LSP messages tether exchanges with language servers, as msgspec structs.

Only the fields tether reads are declared; msgspec ignores the rest, so a server that sends
more (every server does) decodes all the same. Incoming `params` and `result` arrive raw from
the JSON-RPC envelope (`tether.protocol.jsonrpc`) and are decoded here with a decoder cached per
type (`decode_as`); outgoing requests and notifications are encoded with `encode`.
"""

from pathlib import Path
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class Position(msgspec.Struct, frozen=True):
    line: int
    character: int


class Range(msgspec.Struct, frozen=True):
    start: Position
    end: Position


class LspDiagnostic(msgspec.Struct, frozen=True, kw_only=True):
    range: Range
    message: str
    severity: int | None = None
    """1 error, 2 warning, 3 information, 4 hint; absent: the client decides (we say error)."""
    code: int | str | None = None
    source: str | None = None


class PublishDiagnosticsParams(msgspec.Struct, frozen=True, kw_only=True):
    uri: str
    diagnostics: list[LspDiagnostic]
    version: int | None = None


class DocumentDiagnosticReport(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    """`full` (items are the diagnostics) or `unchanged` (the previous result still holds)."""
    items: list[LspDiagnostic] = []
    resultId: str | None = None


class ConfigurationItem(msgspec.Struct, frozen=True, kw_only=True):
    section: str | None = None
    scopeUri: str | None = None


class ConfigurationParams(msgspec.Struct, frozen=True, kw_only=True):
    items: list[ConfigurationItem]


class Registration(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    method: str
    registerOptions: object = None


class RegistrationParams(msgspec.Struct, frozen=True, kw_only=True):
    registrations: list[Registration]


class UnregistrationParams(msgspec.Struct, frozen=True, kw_only=True):
    unregisterations: list[Registration]
    """Spelled this way in the LSP specification."""


class ServerCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    textDocumentSync: object = None
    diagnosticProvider: object = None
    positionEncoding: str | None = None
    definitionProvider: object = None
    typeDefinitionProvider: object = None
    referencesProvider: object = None
    hoverProvider: object = None
    documentSymbolProvider: object = None
    workspaceSymbolProvider: object = None
    renameProvider: object = None


class ServerInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: str | None = None


class InitializeResult(msgspec.Struct, frozen=True, kw_only=True):
    capabilities: ServerCapabilities
    serverInfo: ServerInfo | None = None


class OutgoingRequest(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: int
    method: str
    params: object | msgspec.UnsetType = msgspec.UNSET


class OutgoingNotification(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: object | msgspec.UnsetType = msgspec.UNSET


# `params` is omitted, not null, when a message has none (`shutdown`, `exit`): JSON-RPC 2.0
# allows only a structured value there and some servers hold clients to it.
encode = msgspec.json.Encoder().encode
_decoders: dict[object, msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    return decoder


def decode_as(raw: msgspec.Raw, kind: type[T]) -> T:
    """Decode a raw `params` or `result` (absent counts as null)."""
    return _decoder(kind).decode(bytes(raw) or b"null")


def path_to_uri(path: Path) -> str:
    return path.absolute().as_uri()
