"""The HTTP headers a 2026-07-28 request mirrors from its body (streamable HTTP only).

Every POST names its method (`Mcp-Method`) and, for `tools/call`, `prompts/get` and
`resources/read`, its target (`Mcp-Name`). A tool's `inputSchema` may mark properties with
`x-mcp-header: NAME`: the call's value at that property travels as `Mcp-Param-NAME` too.
A value that is not plain visible ASCII (or that looks like the encoded form) travels as
`=?base64?…?=`. A tool whose markings break the rules is not offered at all
(`mirrored_params` raises), so one bad tool does not cost the server's others.
"""

import base64
import string
from collections.abc import Mapping
from typing import cast

TCHAR = frozenset("!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits)
HEADER_TYPES = ("string", "integer", "boolean")
SAFE_INTEGER = 2**53 - 1
SENTINEL_START, SENTINEL_END = "=?base64?", "?="

ParamPaths = dict[str, tuple[str, ...]]
"""Header name (the part after `Mcp-Param-`) → the property path it mirrors."""


def header_value(value: str) -> str:
    """`value` as a header carries it: as it is when that is safe, else base64 of its UTF-8."""
    plain = (
        value == value.strip(" \t")
        and all(" " <= char <= "~" or char == "\t" for char in value)
        and not (value.startswith(SENTINEL_START) and value.endswith(SENTINEL_END))
    )
    if plain:
        return value
    return SENTINEL_START + base64.b64encode(value.encode()).decode("ascii") + SENTINEL_END


def mirrored_params(schema: object) -> ParamPaths:
    """The `x-mcp-header` markings of an input schema. Raises ValueError naming the first
    one that is not allowed: an empty or non-token name, one used twice (ignoring case), a
    property that is not a string, integer or boolean, or one not reached from the root by
    `properties` alone (through `items`, `anyOf`, `$ref`, …)."""
    found: ParamPaths = {}
    _visit(schema, (), True, found)
    return found


def _visit(node: object, path: tuple[str, ...], reachable: bool, found: ParamPaths) -> None:
    if isinstance(node, list):
        for item in cast("list[object]", node):
            _visit(item, path, False, found)
        return
    if not isinstance(node, dict):
        return
    body = cast("dict[str, object]", node)
    if "x-mcp-header" in body:
        _check(body, path, reachable, found)
    for key, value in body.items():
        if key == "properties" and isinstance(value, dict):
            for name, child in cast("dict[str, object]", value).items():
                _visit(child, (*path, name), reachable, found)
        else:
            _visit(value, path, False, found)


def _check(
    body: dict[str, object], path: tuple[str, ...], reachable: bool, found: ParamPaths
) -> None:
    name = body["x-mcp-header"]
    where = ".".join(path) or "the schema root"
    if not reachable or not path:
        raise ValueError(f"x-mcp-header on {where}, which is not reached by properties alone")
    if not isinstance(name, str) or not name or not set(name) <= TCHAR:
        raise ValueError(f"x-mcp-header {name!r} on {where} is not an HTTP header name")
    if body.get("type") not in HEADER_TYPES:
        raise ValueError(
            f"x-mcp-header {name!r} on {where}, which is not a string, integer or boolean"
        )
    if any(name.lower() == seen.lower() for seen in found):
        raise ValueError(f"x-mcp-header {name!r} is used twice")
    found[name] = path


def param_headers(paths: ParamPaths, arguments: Mapping[str, object]) -> dict[str, str]:
    """The `Mcp-Param-*` headers of one call: a value absent or null sends none."""
    headers: dict[str, str] = {}
    for name, path in paths.items():
        value: object = arguments
        for step in path:
            value = _step(value, step)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif _whole(value):
            text = str(int(cast("float", value)))
        elif isinstance(value, str):
            text = header_value(value)
        else:
            continue
        headers[f"Mcp-Param-{name}"] = text
    return headers


def _whole(value: object) -> bool:
    """An integer a header may carry (JavaScript's safe range); a float like 2.0 counts."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return whole and abs(cast("float", value)) <= SAFE_INTEGER


def _step(value: object, key: str) -> object:
    if isinstance(value, Mapping):
        return cast("Mapping[str, object]", value).get(key)
    return None
