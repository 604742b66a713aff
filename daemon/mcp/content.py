"""A `tools/call` result as text for the model.

Text blocks are kept as they are; a resource link becomes a line naming its URI (and name,
type); an embedded resource its text (or a line for a binary one). tether's model providers
take text only in tool results, so an image or audio block becomes a placeholder line saying
what it was; `structuredContent` is added as JSON when no text block carries it.
"""

import base64
import binascii
from typing import cast

import msgspec


def result_text(result: dict[str, object]) -> tuple[str, bool]:
    """The text the model reads and whether the server marked the call an error."""
    lines: list[str] = []
    blocks = result.get("content")
    for raw in cast("list[object]", blocks) if isinstance(blocks, list) else []:
        if isinstance(raw, dict):
            lines.append(_block(cast("dict[str, object]", raw)))
    structured = result.get("structuredContent")
    if structured is not None and not lines:
        lines.append(msgspec.json.encode(structured).decode())
    text = "\n".join(line for line in lines if line)
    return (text or "(the tool returned no content)"), result.get("isError") is True


def _block(block: dict[str, object]) -> str:
    kind = block.get("type")
    match kind:
        case "text":
            return str(block.get("text", ""))
        case "image" | "audio":
            mime = str(block.get("mimeType", "")) or "unknown type"
            return (
                f"[{kind} ({mime}, {_decoded_size(block.get('data'))}) returned by the tool: "
                "not shown, tether passes only text to the model]"
            )
        case "resource_link":
            return _link(block)
        case "resource":
            inner = block.get("resource")
            if not isinstance(inner, dict):
                return ""
            resource = cast("dict[str, object]", inner)
            uri = resource.get("uri", "")
            if isinstance(resource.get("text"), str):
                return f"[resource {uri}]\n{resource['text']}"
            mime = str(resource.get("mimeType", "")) or "binary"
            return f"[resource {uri} ({mime}, {_decoded_size(resource.get('blob'))}): not shown]"
        case _:
            return f"[a {kind!r} block tether cannot show]"


def _link(block: dict[str, object]) -> str:
    parts = [f"[resource link] {block.get('uri', '')}"]
    for key in ("name", "mimeType", "description"):
        value = block.get(key)
        if isinstance(value, str) and value:
            parts.append(f"{key}: {value}")
    return " · ".join(parts)


def _decoded_size(data: object) -> str:
    if not isinstance(data, str):
        return "no data"
    try:
        return f"{len(base64.b64decode(data, validate=False)):,} bytes"
    except (binascii.Error, ValueError):
        return f"{len(data):,} base64 characters"
