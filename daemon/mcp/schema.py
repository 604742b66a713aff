"""Checking a model's arguments against an MCP tool's JSON Schema before the server is called.

The common vocabulary of tool schemas is checked: `type` (one or a list), `properties`,
`required`, `additionalProperties` (false or a schema), `items`, `enum`, `const`, `minimum`,
`maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `minLength`, `maxLength`, `minItems`,
`maxItems`, `pattern`, `anyOf`, `oneOf`, `allOf`, and local `$ref`s (`#/$defs/…`,
`#/definitions/…`). Other keywords are not checked here (the server still checks its own
input); a schema this cannot read checks nothing rather than refusing good calls.
"""

import re
from typing import cast

MAX_PROBLEMS = 5


def problems(schema: object, value: object) -> list[str]:
    """What is wrong with `value` under `schema`, each problem naming where (`$.path`); empty
    when it conforms (as far as the keywords above go)."""
    found: list[str] = []
    root = cast("dict[str, object]", schema) if isinstance(schema, dict) else {}
    _check(root, root, value, "$", found)
    return found[:MAX_PROBLEMS]


def _type_ok(expected: str, value: object) -> bool:
    match expected:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and value.is_integer()
            )
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case _:
            return True


def _resolve(root: dict[str, object], node: dict[str, object]) -> dict[str, object]:
    ref = node.get("$ref")
    for _ in range(32):
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: object = root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict):
                return {}
            mapping = cast("dict[str, object]", target)  # pyright: ignore[reportUnnecessaryCast]
            target = mapping.get(part)
        if not isinstance(target, dict):
            return {}
        node = cast("dict[str, object]", target)
        ref = node.get("$ref")
    return {}


def _check(
    root: dict[str, object], node: dict[str, object], value: object, at: str, found: list[str]
) -> None:
    if len(found) >= MAX_PROBLEMS:
        return
    whole: object = value
    node = _resolve(root, node)
    expected = node.get("type")
    types = [expected] if isinstance(expected, str) else expected
    if isinstance(types, list):
        names = [t for t in cast("list[object]", types) if isinstance(t, str)]
        if names and not any(_type_ok(t, value) for t in names):
            found.append(f"{at}: expected {' or '.join(names)}, got {_kind(value)}")
            return
    if "enum" in node and isinstance(node["enum"], list):
        options = cast("list[object]", node["enum"])
        if value not in options:
            found.append(f"{at}: must be one of {', '.join(map(_short, options))}")
    if "const" in node and value != node["const"]:
        found.append(f"{at}: must be {_short(node['const'])}")
    if isinstance(value, dict):
        _check_object(root, node, cast("dict[str, object]", value), at, found)
    elif isinstance(value, list):
        _check_array(root, node, cast("list[object]", value), at, found)
    elif isinstance(value, str):
        _check_string(node, value, at, found)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(node, value, at, found)
    _check_combinators(root, node, whole, at, found)


def _check_object(
    root: dict[str, object],
    node: dict[str, object],
    value: dict[str, object],
    at: str,
    found: list[str],
) -> None:
    raw_properties = node.get("properties")
    properties = (
        cast("dict[str, object]", raw_properties) if isinstance(raw_properties, dict) else {}
    )
    required = node.get("required")
    if isinstance(required, list):
        for name in cast("list[object]", required):
            if isinstance(name, str) and name not in value:
                found.append(f"{at}: missing required property {name!r}")
    extra = node.get("additionalProperties", True)
    for name, item in value.items():
        sub = properties.get(name)
        if isinstance(sub, dict):
            _check(root, cast("dict[str, object]", sub), item, f"{at}.{name}", found)
        elif extra is False:
            found.append(f"{at}: unknown property {name!r} (allowed: {', '.join(properties)})")
        elif isinstance(extra, dict):
            _check(root, cast("dict[str, object]", extra), item, f"{at}.{name}", found)


def _check_array(
    root: dict[str, object], node: dict[str, object], value: list[object], at: str, found: list[str]
) -> None:
    items = node.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(root, cast("dict[str, object]", items), item, f"{at}[{index}]", found)
    low, high = node.get("minItems"), node.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        found.append(f"{at}: needs at least {low} items, has {len(value)}")
    if isinstance(high, int) and len(value) > high:
        found.append(f"{at}: takes at most {high} items, has {len(value)}")


def _check_string(node: dict[str, object], value: str, at: str, found: list[str]) -> None:
    low, high = node.get("minLength"), node.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        found.append(f"{at}: needs at least {low} characters, has {len(value)}")
    if isinstance(high, int) and len(value) > high:
        found.append(f"{at}: takes at most {high} characters, has {len(value)}")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a pattern Python cannot read is not ours to enforce
        if not matched:
            found.append(f"{at}: does not match the pattern {pattern!r}")


_BOUNDS = (
    ("minimum", "at least"),
    ("maximum", "at most"),
    ("exclusiveMinimum", "more than"),
    ("exclusiveMaximum", "less than"),
)


def _check_number(node: dict[str, object], value: float, at: str, found: list[str]) -> None:
    for key, words in _BOUNDS:
        bound = node.get(key)
        if not isinstance(bound, int | float) or isinstance(bound, bool):
            continue
        ok = {
            "minimum": value >= bound,
            "maximum": value <= bound,
            "exclusiveMinimum": value > bound,
            "exclusiveMaximum": value < bound,
        }[key]
        if not ok:
            found.append(f"{at}: must be {words} {bound}, got {value}")


def _check_combinators(
    root: dict[str, object], node: dict[str, object], value: object, at: str, found: list[str]
) -> None:
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list):
            subs = [
                cast("dict[str, object]", o)
                for o in cast("list[object]", options)
                if isinstance(o, dict)
            ]
            matching = [s for s in subs if not _problems_under(root, s, value, at)]
            if subs and not matching:
                found.append(f"{at}: matches none of the allowed shapes ({key})")
    every = node.get("allOf")
    if isinstance(every, list):
        for sub in cast("list[object]", every):
            if isinstance(sub, dict):
                _check(root, cast("dict[str, object]", sub), value, at, found)


def _problems_under(
    root: dict[str, object], node: dict[str, object], value: object, at: str
) -> list[str]:
    found: list[str] = []
    _check(root, node, value, at, found)
    return found


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return "number"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
