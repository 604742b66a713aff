"""Request invariants: what the Anthropic Messages API would refuse in a request body.

Requests are checked the way the Messages API checks them (``max_tokens``, non-empty blocks,
every ``tool_result`` answering a ``tool_use`` of the message before, results before other
content) and, more strictly than the API, user and assistant must alternate. The server
refuses such a request with a 400 ``invalid_request_error`` naming the problem (recorded, but
it consumes no step); tests that replay their own streams call `anthropic_request_problem`.
"""

from __future__ import annotations

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
            use_id = block.get("tool_use_id")
            if use_id not in previous_uses:
                return (
                    f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}."
                    " Each `tool_result` block must have a corresponding `tool_use` block in"
                    " the previous message."
                )
        elif kind in ("thinking", "redacted_thinking", "image", "document"):
            seen_other = True
        else:
            return f"{at}.type: unknown content block type {kind!r}"
    return None
