"""What a step's reply is made of, whichever dialect carries it.

The pieces its text and reasoning are streamed in, its finish reason, its token usage and the
rewrite a model without native tools makes of its calls. Pure functions; the dialects
(`tether.testing.openai`, `tether.testing.anthropic`) put these into their own shapes.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, cast

from tether.testing.script import JSONObject, Step, UsageSpec

DEFAULT_CHUNK_CHARS = 20
"""The size of a streamed piece when the step does not give ``chunks``."""


def split_text(text: str, pieces: int) -> list[str]:
    """Split `text` into `pieces` roughly equal non-empty parts (fewer if it is too short)."""
    if not text:
        return []
    count = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), count)
    parts: list[str] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts


def text_pieces(step: Step) -> list[str]:
    text = step.text or ""
    count = step.chunks or math.ceil(len(text) / DEFAULT_CHUNK_CHARS)
    return split_text(text, count)


def reasoning_pieces(step: Step) -> list[str]:
    text = step.reasoning or ""
    return split_text(text, math.ceil(len(text) / DEFAULT_CHUNK_CHARS))


def finish_reason(step: Step) -> str:
    """The step's finish reason in OpenAI's words (the Anthropic dialect maps it)."""
    if step.finish_reason is not None:
        return step.finish_reason
    return "tool_calls" if step.tool_calls else "stop"


def text_tool_step(step: Step) -> Step:
    """The step as a model without native tools answers it: each call written as a
    ``<tool_call>`` block after the text, and no native calls."""
    if not step.tool_calls:
        return step
    blocks = "\n".join(
        f'<tool_call>{{"name":{json.dumps(call.name)},"arguments":{call.arguments}}}</tool_call>'
        for call in step.tool_calls
    )
    text = f"{step.text}\n\n{blocks}" if step.text else blocks
    return replace(step, text=text, tool_calls=())


def _string_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_string_chars(item) for item in cast(list[Any], value))
    if isinstance(value, dict):
        return sum(_string_chars(item) for item in cast(dict[str, Any], value).values())
    return 0


def _prompt_chars(body: JSONObject) -> int:
    """Characters of message content and tool-call arguments in the request."""
    messages: Any = body.get("messages")
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in cast(list[Any], messages):
        if not isinstance(message, dict):
            continue
        msg = cast(dict[str, Any], message)
        total += _string_chars(msg.get("content"))
        total += _string_chars(msg.get("tool_calls"))
    return total + _string_chars(body.get("system"))


def _estimate_tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def usage(step: Step, body: JSONObject) -> JSONObject:
    """``prompt_tokens``, ``completion_tokens`` and ``total_tokens``: the step's own counts,
    the missing ones estimated as characters / 4 of the request and of the reply."""
    spec = step.usage or UsageSpec()
    prompt = spec.prompt_tokens
    if prompt is None:
        prompt = _estimate_tokens(_prompt_chars(body))
    completion = spec.completion_tokens
    if completion is None:
        chars = len(step.text or "") + sum(len(c.name) + len(c.arguments) for c in step.tool_calls)
        completion = _estimate_tokens(chars)
    total = spec.total_tokens if spec.total_tokens is not None else prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
