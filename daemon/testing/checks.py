"""Request invariants: what the Anthropic Messages API (and, for content parts, the OpenAI
chat completions API) would refuse in a request body.

Requests are checked the way the Messages API checks them (``max_tokens``, non-empty blocks,
every ``tool_result`` answering a ``tool_use`` of the message before, results before other
content) and, more strictly than the API, user and assistant must alternate. The server
refuses such a request with a 400 ``invalid_request_error`` naming the problem (recorded, but
it consumes no step); tests that replay their own streams call `anthropic_request_problem`.

Images are checked in both dialects as the APIs check them: an Anthropic ``image`` block needs
a ``base64`` source with a ``media_type`` of png, jpeg, gif or webp and ``data`` that is valid
base64 (or a ``url`` source); an OpenAI ``image_url`` part needs ``image_url.url``, an http(s)
URL or a ``data:image/…;base64,`` URL with valid base64; both only in user messages (and, for
Anthropic, inside a ``tool_result``'s content). Chat completions bodies are checked for the
order of tool calls: every call of an assistant message answered by ``tool`` messages right
after it, before any other message, and a ``tool`` message only in answer to one. Stricter
than the APIs, the decoded bytes must be the image the type names (by their magic bytes), so a
test catches a mislabelled image. `openai_request_problem` checks chat completions bodies.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import cast

from tether.testing.script import JSONObject


def anthropic_request_problem(body: JSONObject) -> str | None:
    """What the Messages API would reject in `body` (None when it is well formed).

    Stricter than the real API in one way: user and assistant must alternate (the real API
    merges consecutive same-role messages), because tether promises to send them merged.
    """
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    problem = _system_problem(body.get("system"))
    if problem is not None:
        return problem
    tools: object = body.get("tools", [])
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    for i, tool in enumerate(cast(list[object], tools)):
        if not isinstance(tool, dict):
            return f"tools.{i}: Input should be an object"
        spec = cast(JSONObject, tool)
        if not isinstance(spec.get("name"), str) or not isinstance(spec.get("input_schema"), dict):
            return f"tools.{i}: needs 'name' and an 'input_schema' object"
    messages: object = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return _messages_problem(cast(list[object], messages))


def _system_problem(system: object) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list):
        return "system: Input should be a valid string or list of text blocks"
    for i, block in enumerate(cast(list[object], system)):
        if not isinstance(block, dict) or cast(JSONObject, block).get("type") != "text":
            return f"system.{i}: Input should be a text block"
        if not cast(JSONObject, block).get("text"):
            return f"system.{i}: text content blocks must be non-empty"
    return None


def _messages_problem(messages: list[object]) -> str | None:
    previous_uses: list[str] = []
    expected = "user"
    for i, raw in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(raw, dict):
            return f"{where}: Input should be an object"
        message = cast(JSONObject, raw)
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        if role != expected:
            return (
                f"{where}: roles must alternate between 'user' and 'assistant',"
                " starting with 'user'"
            )
        expected = "assistant" if role == "user" else "user"
        content: object = message.get("content")
        if isinstance(content, str):
            blocks: list[JSONObject] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = []
            for j, block in enumerate(cast(list[object], content)):
                if not isinstance(block, dict):
                    return f"{where}.content.{j}: Input should be an object"
                blocks.append(cast(JSONObject, block))
        else:
            return f"{where}: content must be a non-empty string or list of blocks"
        problem = _blocks_problem(where, str(role), blocks, previous_uses)
        if problem is not None:
            return problem
        if role == "user":
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            missing = [use for use in previous_uses if use not in answered]
            if missing:
                return (
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks"
                    f" immediately after: {', '.join(missing)}. Each `tool_use` block must have"
                    " a corresponding `tool_result` block in the next message."
                )
            previous_uses = []
        else:
            previous_uses = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
    return None


def _blocks_problem(
    where: str, role: str, blocks: list[JSONObject], previous_uses: list[str]
) -> str | None:
    seen_other = False
    for j, block in enumerate(blocks):
        kind = block.get("type")
        at = f"{where}.content.{j}"
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                return f"{at}: text content blocks must contain non-whitespace text"
            seen_other = True
        elif kind == "tool_use":
            if role != "assistant":
                return f"{at}: tool_use blocks are only allowed in assistant messages"
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                return f"{at}: tool_use needs 'id' and 'name'"
            if not isinstance(block.get("input"), dict):
                return f"{at}.input: Input should be an object"
        elif kind == "tool_result":
            if role != "user":
                return f"{at}: tool_result blocks are only allowed in user messages"
            if seen_other:
                return f"{at}: tool_result blocks must come before any other content"
            problem = _tool_result_content_problem(at, block.get("content", ""))
            if problem is not None:
                return problem
            use_id = block.get("tool_use_id")
            if use_id not in previous_uses:
                return (
                    f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}."
                    " Each `tool_result` block must have a corresponding `tool_use` block in"
                    " the previous message."
                )
        elif kind == "image":
            if role != "user":
                return f"{at}: image blocks are only allowed in user messages"
            problem = _anthropic_image_problem(at, block.get("source"))
            if problem is not None:
                return problem
            seen_other = True
        elif kind in ("thinking", "redacted_thinking", "document"):
            seen_other = True
        else:
            return f"{at}.type: unknown content block type {kind!r}"
    return None


def _tool_result_content_problem(at: str, content: object) -> str | None:
    """A `tool_result`'s content: a string, or a list of text and image blocks."""
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{at}.content: Input should be a valid string or list of blocks"
    for k, raw in enumerate(cast(list[object], content)):
        inner = f"{at}.content.{k}"
        if not isinstance(raw, dict):
            return f"{inner}: Input should be an object"
        block = cast(JSONObject, raw)
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                return f"{inner}: text content blocks must contain non-whitespace text"
        elif kind == "image":
            problem = _anthropic_image_problem(inner, block.get("source"))
            if problem is not None:
                return problem
        else:
            return f"{inner}.type: a tool_result holds only text and image blocks, not {kind!r}"
    return None


IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_DATA_URL = re.compile(r"data:(?P<type>[\w/+.-]+);base64,(?P<data>.*)", re.DOTALL)


def image_media_type(data: bytes) -> str | None:
    """The media type `data` is by its magic bytes (PNG, JPEG, GIF, WebP), else None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _base64_image_problem(at: str, media_type: object, data: object) -> str | None:
    if media_type not in IMAGE_MEDIA_TYPES:
        return (
            f"{at}: image media type {media_type!r} is not supported; use one of"
            f" {', '.join(IMAGE_MEDIA_TYPES)}"
        )
    if not isinstance(data, str) or not data:
        return f"{at}: image data must be a non-empty base64 string"
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"{at}: invalid base64 image data"
    actual = image_media_type(decoded)
    if actual != media_type:
        return (
            f"{at}: the image data does not match the provided media type {media_type}"
            f" ({actual or 'not an image'})"
        )
    return None


def _anthropic_image_problem(at: str, source: object) -> str | None:
    if not isinstance(source, dict):
        return f"{at}.source: Field required (an object)"
    spec = cast(JSONObject, source)
    kind = spec.get("type")
    if kind == "url":
        url = spec.get("url")
        return (
            None
            if isinstance(url, str) and url.startswith(("http://", "https://"))
            else (f"{at}.source.url: an http(s) URL is required")
        )
    if kind != "base64":
        return f"{at}.source.type: Input should be 'base64' or 'url'"
    return _base64_image_problem(f"{at}.source", spec.get("media_type"), spec.get("data"))


def openai_request_problem(body: JSONObject) -> str | None:
    """What the chat completions API would reject in the content parts of `body`'s messages
    (None when they are well formed; the rest of the body is not checked)."""
    messages: object = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    unanswered: list[str] = []
    for i, raw in enumerate(cast(list[object], messages)):
        if not isinstance(raw, dict):
            return f"messages[{i}]: Input should be an object"
        message = cast(JSONObject, raw)
        problem = _openai_order_problem(i, message, unanswered)
        if problem is not None:
            return problem
        content: object = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(cast(list[object], content)):
            at = f"messages[{i}].content[{j}]"
            if not isinstance(part, dict):
                return f"{at}: Input should be an object"
            problem = _openai_part_problem(at, str(message.get("role")), cast(JSONObject, part))
            if problem is not None:
                return problem
    return None


def _openai_order_problem(i: int, message: JSONObject, unanswered: list[str]) -> str | None:
    """The API's rule for tool calls: an assistant message with `tool_calls` must be followed
    by `tool` messages answering each of them, before any other message; a `tool` message
    answers a call of that assistant message. `unanswered` carries the calls still open."""
    role = message.get("role")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if call_id not in unanswered:
            return (
                f"messages[{i}]: messages with role 'tool' must be a response to a preceding"
                f" message with 'tool_calls' (tool_call_id {call_id!r})"
            )
        unanswered.remove(cast(str, call_id))
        content: object = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and cast(JSONObject, part).get("type") != "text"
            for part in cast(list[object], content)
        ):
            return f"messages[{i}].content: a tool message takes text parts only"
        return None
    if unanswered:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages"
            f" responding to each 'tool_call_id'. The following tool_call_ids did not have"
            f" response messages: {', '.join(unanswered)} (at messages[{i}])"
        )
    calls: object = message.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        for call in cast(list[object], calls):
            if isinstance(call, dict):
                unanswered.append(str(cast(JSONObject, call).get("id")))
    return None


def _openai_part_problem(at: str, role: str, part: JSONObject) -> str | None:
    kind = part.get("type")
    if kind == "text":
        return None if isinstance(part.get("text"), str) else f"{at}.text: Field required"
    if kind != "image_url":
        return f"{at}.type: unknown content part type {kind!r}"
    if role != "user":
        return f"{at}: image content parts are only allowed in user messages"
    image: object = part.get("image_url")
    url = cast(JSONObject, image).get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        return f"{at}.image_url.url: Field required"
    if url.startswith(("http://", "https://")):
        return None
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return f"{at}.image_url.url: Invalid image URL: an http(s) URL or a base64 data URL"
    return _base64_image_problem(f"{at}.image_url", match["type"], match["data"])
