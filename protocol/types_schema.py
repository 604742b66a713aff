"""JSON Schema of the protocol's messages for code generators (quicktype,
datamodel-code-generator and the like).

The whole schema (`tether.protocol.schema`) is a catalogue: methods, notifications and errors
under their own keys, the types under `$defs`, and nothing at its root for a generator to
start from. This one has the same `$defs` and, at its root, `anyOf` every message: each
method's params and result, each notification's params (both ways), the discovery file and
each error's `data`. Inline enums are named for their struct and field: a union member's
`type` tag is a `const` titled `AgentMessageType`, which generators make a literal; a larger
enum is a definition of its own (`LspServerStatusState`). Generated names then say what they
are, not `Type1` … `Type22` or `State1`.

The committed copy lives at `packaging/schema/tether-protocol.types.schema.json`; regenerate
it with `python -m tether.protocol.types_schema >
packaging/schema/tether-protocol.types.schema.json`. A test fails when it is stale, and one
generates Python from it.
"""

import json
import sys
from collections.abc import Iterator
from typing import cast

from tether.protocol.schema import SCHEMA_ID, build_schema

TYPES_SCHEMA_ID = SCHEMA_ID.removesuffix(".json") + ".types.json"

ROOT_TITLE = "TetherMessage"

_Json = dict[str, object]


def _message_refs(schema: _Json) -> Iterator[str]:
    """The `$ref` of every message the catalogue names, in its order."""
    sections = ("methods", "notifications", "clientNotifications")
    for section in sections:
        for entry in cast("dict[str, _Json]", schema[section]).values():
            for part in ("params", "result"):
                if part in entry:
                    yield cast("str", cast("_Json", entry[part])["$ref"])
    yield cast("str", cast("_Json", schema["discoveryFile"])["$ref"])
    for error in cast("dict[str, _Json]", schema["errors"]).values():
        if "data" in error:
            yield cast("str", cast("_Json", error["data"])["$ref"])


def _name_enums(node: _Json, title: str, defs: dict[str, _Json]) -> _Json:
    """A property's schema `node` with its inline enums named `title`: a one-value enum (a
    union's `type` tag) becomes a titled `const`, which generators make a literal; a larger
    one moves to `defs` under that name (kept inline, titled, if the name is taken)."""
    if "enum" in node:
        values = cast("list[object]", node["enum"])
        if len(values) == 1:
            rest = {key: value for key, value in node.items() if key != "enum"}
            return {**rest, "const": values[0], "title": title}
        if title in defs:
            return {**node, "title": title}
        defs[title] = {**node, "title": title}
        return {"$ref": f"#/$defs/{title}"}
    result = dict(node)
    for key in ("anyOf", "oneOf"):
        if key in node:
            result[key] = [_name_enums(o, title, defs) for o in cast("list[_Json]", node[key])]
    items = node.get("items")
    if isinstance(items, dict):
        result["items"] = _name_enums(cast("_Json", items), title + "Item", defs)
    return result


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_"))


def build_types_schema() -> _Json:
    catalogue = build_schema()
    # A copy of its own: the catalogue is rendered from the same structures.
    defs = cast("dict[str, _Json]", json.loads(json.dumps(catalogue["$defs"])))
    for name, definition in list(defs.items()):
        properties = cast("dict[str, _Json]", definition.get("properties", {}))
        for field, prop in properties.items():
            properties[field] = _name_enums(prop, name + _pascal(field), defs)
    refs = list(dict.fromkeys(_message_refs(catalogue)))
    return {
        "$schema": catalogue["$schema"],
        "$id": TYPES_SCHEMA_ID,
        "title": ROOT_TITLE,
        "description": (
            "Every message of tether's protocol, for code generators: each method's params "
            "and result, each notification's params, the discovery file and each error's "
            "`data`. The rules (methods, error codes, transport) are in "
            "tether-protocol.schema.json, which has the same definitions."
        ),
        "protocolVersion": catalogue["protocolVersion"],
        "anyOf": [{"$ref": ref} for ref in refs],
        "$defs": defs,
    }


def render_types_schema() -> str:
    return json.dumps(build_types_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_types_schema())
