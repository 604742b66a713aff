"""JSON Schema of the whole protocol, generated from the method table.

The committed copy lives at `packaging/schema/tether-protocol.schema.json`; regenerate it with
`python -m tether.protocol.schema > packaging/schema/tether-protocol.schema.json`. A test fails
when the committed copy is stale. Clients in other languages are written against it, so it
says everything a client author needs without reading Python:

- every definition has a description: the struct's docstring;
- every documented field has one: the docstring under it in the class body (read from the
  source with `ast`: msgspec publishes class docstrings only);
- a tagged union (`type`) says that unknown members are skipped;
- each method lists its error codes, and `errors` the shape of each code's `data`;
- `x-tether-transport` carries the connection's limits (see `tether.protocol.transport`).
"""

import ast
import functools
import inspect
import itertools
import json
import sys
import textwrap
from collections.abc import Iterator

import msgspec

from tether.protocol import transport
from tether.protocol.base import Wire
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.error_data import ERROR_DATA
from tether.protocol.errors import ERROR_DOCS, GENERIC_ERRORS
from tether.protocol.methods import CLIENT_NOTIFICATIONS, METHODS, NOTIFICATIONS
from tether.protocol.version import PROTOCOL_VERSION

_REF_TEMPLATE = "#/$defs/{name}"

SCHEMA_ID = f"https://tether.dev/schema/protocol/v{PROTOCOL_VERSION}.json"

DESCRIPTION = (
    "tether's protocol: JSON-RPC 2.0 over a websocket on 127.0.0.1, one message per text "
    "frame, no batches (`x-tether-transport` has the limits; docs/protocol.md the rules). "
    "Send `initialize` first. Methods are under `methods` (params, result, error codes), "
    "notifications from the daemon under `notifications`, error codes under `errors`. "
    "Forward compatibility is a rule: a client ignores fields, event types, item types and "
    "enum values it does not know, because a newer daemon may send them without changing "
    "`protocolVersion`; every field added later has a default. Timestamps (`*At`) are seconds "
    "since the Unix epoch, as floats."
)

UNION_NOTE = (
    "One of the listed kinds, told apart by `type`. A newer daemon may add kinds: skip one "
    "whose `type` you do not know."
)

_DESCRIBED_HERE = {
    "InitializeParams": (
        "The first request of every connection: who the client is and which protocol version "
        "it speaks (a daemon refuses a newer one with UNSUPPORTED_PROTOCOL)."
    ),
    "InitializeResult": "The daemon's versions, workspace and pid.",
}
"""Descriptions of structs whose classes carry no docstring yet (they are being extended
elsewhere); a class docstring, once there, wins."""


def _schema_hook(kind: type) -> dict[str, object]:
    if kind is msgspec.Raw:
        return {"type": "object"}  # embedded JSON Schema documents
    raise NotImplementedError(f"no JSON Schema for {kind!r}")


def _structs() -> Iterator[type[Wire]]:
    pending: list[type[Wire]] = [Wire]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        yield kind


@functools.cache
def _class_defs(module: str) -> dict[str, ast.ClassDef]:
    """The classes a module defines at its top level, parsed once per module (asking
    `inspect.getsource` per class parses the module again each time)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def field_docs(kind: type[Wire]) -> dict[str, str]:
    """The docstrings written under `kind`'s fields (its bases' included), by wire name."""
    docs: dict[str, str] = {}
    for base in reversed(kind.__mro__):
        if not (isinstance(base, type) and issubclass(base, Wire)) or base is Wire:
            continue
        body = _class_defs(base.__module__).get(base.__qualname__)
        if body is None:  # not defined at a module's top level
            body = ast.parse(textwrap.dedent(inspect.getsource(base))).body[0]
        assert isinstance(body, ast.ClassDef)
        for field, after in itertools.pairwise(body.body):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[field.target.id] = _unwrap(after.value.value)
    wire_names = {f.name: f.encode_name for f in msgspec.structs.fields(kind)}
    return {wire_names[name]: doc for name, doc in docs.items() if name in wire_names}


def _unwrap(docstring: str) -> str:
    """A docstring as the schema shows it: paragraphs kept, lines within one joined."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _describe(defs: dict[str, dict[str, object]]) -> None:
    by_name = {kind.__name__: kind for kind in _structs()}
    for name, definition in defs.items():
        if "description" not in definition and name in _DESCRIBED_HERE:
            definition["description"] = _DESCRIBED_HERE[name]
        properties = definition.get("properties")
        if not isinstance(properties, dict) or name not in by_name:
            continue
        docs = field_docs(by_name[name])
        for field, prop in properties.items():  # pyright: ignore[reportUnknownVariableType]
            assert isinstance(prop, dict)
            assert isinstance(field, str)
            notes: list[str] = []
            if field in docs:
                notes.append(docs[field])
            items = prop.get("items")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if "discriminator" in prop or (isinstance(items, dict) and "discriminator" in items):
                notes.append(UNION_NOTE)
            if notes:
                prop["description"] = " ".join(notes)


def build_schema() -> dict[str, object]:
    kinds: list[object] = []
    for method in METHODS.values():
        kinds += [method.params, method.result]
    kinds += list(NOTIFICATIONS.values())
    kinds += list(CLIENT_NOTIFICATIONS.values())
    kinds.append(DiscoveryInfo)
    data_codes = list(ERROR_DATA)
    kinds += [ERROR_DATA[code] for code in data_codes]
    refs, defs = msgspec.json.schema_components(
        kinds, schema_hook=_schema_hook, ref_template=_REF_TEMPLATE
    )
    _describe(defs)
    it = iter(refs)
    methods: dict[str, dict[str, object]] = {}
    for name, method in METHODS.items():
        methods[name] = {
            "description": method.doc,
            "params": next(it),
            "result": next(it),
            "errors": [int(code) for code in method.errors],
        }
        if method.needs_controller:
            methods[name]["controllerOnly"] = True
    notifications = {name: {"params": next(it)} for name in NOTIFICATIONS}
    client_notifications = {name: {"params": next(it)} for name in CLIENT_NOTIFICATIONS}
    discovery = next(it)
    data = {code: next(it) for code in data_codes}
    errors: dict[str, dict[str, object]] = {}
    for code, doc in ERROR_DOCS.items():
        entry: dict[str, object] = {"name": code.name, "description": doc}
        if code in GENERIC_ERRORS:
            entry["anyMethod"] = True
        if code in data:
            entry["data"] = data[code]
        errors[str(int(code))] = entry
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "tether protocol",
        "description": DESCRIPTION,
        "protocolVersion": PROTOCOL_VERSION,
        "x-tether-transport": _transport(),
        "methods": methods,
        "notifications": notifications,
        "clientNotifications": client_notifications,
        "discoveryFile": discovery,
        "errors": errors,
        "$defs": defs,
    }


def _transport() -> dict[str, object]:
    return {
        "description": (
            "The websocket the daemon serves. Connect to ws://{host}:{port}/ with the port and "
            "token of the discovery file, sending `Authorization: Bearer <token>` (401 "
            "otherwise). The `Host` header must name a loopback address and a browser `Origin` "
            "is refused (403). Send each JSON-RPC message as one text frame; the daemon sends "
            "only text frames."
        ),
        **{_camel(name): value for name, value in _TRANSPORT_VALUES.items()},
        "closeCodes": {str(code): why for code, why in transport.CLOSE_CODES.items()},
        "notes": {_camel(name): doc for name, doc in _constant_docs(transport).items()},
    }


_TRANSPORT_VALUES: dict[str, object] = {
    "HOST": transport.HOST,
    "MAX_MESSAGE_BYTES": transport.MAX_MESSAGE_BYTES,
    "HANDSHAKE_TIMEOUT_SECONDS": transport.HANDSHAKE_TIMEOUT_SECONDS,
    "PING_INTERVAL_SECONDS": transport.PING_INTERVAL_SECONDS,
    "PING_TIMEOUT_SECONDS": transport.PING_TIMEOUT_SECONDS,
    "CLIENT_BUFFER_BYTES": transport.CLIENT_BUFFER_BYTES,
    "RESYNC_RESERVE_BYTES": transport.RESYNC_RESERVE_BYTES,
    "REPLAY_RING_BYTES": transport.REPLAY_RING_BYTES,
    "MERGED_DELTA_BYTES": transport.MERGED_DELTA_BYTES,
}


def _camel(name: str) -> str:
    first, *rest = name.lower().split("_")
    return first + "".join(part.title() for part in rest)


def _constant_docs(module: object) -> dict[str, str]:
    """The docstrings written under a module's top-level constants, by name."""
    body = ast.parse(inspect.getsource(module)).body  # pyright: ignore[reportArgumentType]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if (
            isinstance(target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[target.id] = _unwrap(after.value.value)
    return docs


def render_schema() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_schema())
