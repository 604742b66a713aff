"""A `tools/call` result as what the model gets: text, and the images it may see.

Text blocks are kept as they are; a resource link becomes a line naming its URI (and name,
type); an embedded resource its text (or a line for a binary one); `structuredContent` is
added as JSON when no text block carries it. An audio block becomes a placeholder line.

An image block (base64 `data`, `mimeType` PNG, JPEG, GIF or WebP) becomes an `McpImage`, named
`TOOL-N.EXT`, at most `MAX_RESULT_IMAGES` (4) per result, in its place among the lines; the
caller turns each into a line of the text (naming it, or saying why it was not sent), so a
text-only model and the transcript still say what came back. An image of another type, one
whose data is not base64, and those past the fourth stay placeholder lines saying so.
"""

import base64
import binascii
from collections.abc import Sequence
from typing import Final, cast

import msgspec

from tether.protocol.images import IMAGE_MIME_TYPES

MAX_RESULT_IMAGES: Final = 4
"""Images of one result sent to the model; a screenshot tool rarely needs more, and each one
costs up to 1,600 tokens in every later request."""
_EXTENSIONS: Final = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}


class McpImage(msgspec.Struct, frozen=True, kw_only=True):
    """An image block of a result, decoded (not yet checked: its bytes may be anything)."""

    name: str
    mime_type: str
    """What the server said it is."""
    data: bytes


Part = str | McpImage


def result_parts(result: dict[str, object], tool: str = "tool") -> tuple[list[Part], bool]:
    """The result's lines and images in order, and whether the server marked it an error."""
    parts: list[Part] = []
    blocks = result.get("content")
    for raw in cast("list[object]", blocks) if isinstance(blocks, list) else []:
        if not isinstance(raw, dict):
            continue
        block = cast("dict[str, object]", raw)
        if block.get("type") == "image":
            parts.append(_image(block, tool, sum(isinstance(p, McpImage) for p in parts)))
        else:
            parts.append(_block(block))
    structured = result.get("structuredContent")
    if structured is not None and not parts:
        parts.append(msgspec.json.encode(structured).decode())
    return parts, result.get("isError") is True


def join_lines(lines: Sequence[str]) -> str:
    """The text of a result's lines (its images already made lines by the caller)."""
    return "\n".join(line for line in lines if line) or "(the tool returned no content)"


def result_text(result: dict[str, object]) -> tuple[str, bool]:
    """The result as text alone (each image a line saying it was not shown), and whether the
    server marked it an error."""
    parts, is_error = result_parts(result)
    lines = [
        p if isinstance(p, str) else not_shown(p, "tether sends no images here") for p in parts
    ]
    return join_lines(lines), is_error


def not_shown(image: McpImage, why: str) -> str:
    """The line for an image of a result that is not sent, saying `why`."""
    return (
        f"[image ({image.mime_type}, {len(image.data):,} bytes) returned by the tool: "
        f"not shown, {why}]"
    )


def _image(block: dict[str, object], tool: str, earlier: int) -> Part:
    mime = str(block.get("mimeType", "")) or "unknown type"
    mime = "image/jpeg" if mime == "image/jpg" else mime  # a name some servers use
    data = block.get("data")
    if mime not in IMAGE_MIME_TYPES:
        return _placeholder(block, "tether sends only PNG, JPEG, GIF and WebP images")
    if not isinstance(data, str):
        return _placeholder(block, "it has no data")
    try:
        decoded = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return _placeholder(block, "its data is not valid base64")
    if earlier >= MAX_RESULT_IMAGES:
        return _placeholder(
            block, f"only the first {MAX_RESULT_IMAGES} images of a result are sent"
        )
    return McpImage(name=f"{tool}-{earlier + 1}.{_EXTENSIONS[mime]}", mime_type=mime, data=decoded)


def _placeholder(block: dict[str, object], why: str) -> str:
    kind = block.get("type")
    mime = str(block.get("mimeType", "")) or "unknown type"
    return (
        f"[{kind} ({mime}, {_decoded_size(block.get('data'))}) returned by the tool: "
        f"not shown, {why}]"
    )


def _block(block: dict[str, object]) -> str:
    kind = block.get("type")
    match kind:
        case "text":
            return str(block.get("text", ""))
        case "audio":
            return _placeholder(block, "tether passes no audio to the model")
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
