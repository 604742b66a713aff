"""The Anthropic Messages dialect: a step as a message, as stream events, and errors.

Streamed replies send ``message_start`` (with the input tokens), ``ping``, a ``thinking``
block with a signature for the reasoning, a ``text`` block, a ``tool_use`` block per call whose
input arrives in two ``input_json_delta`` fragments, then ``message_delta`` (the stop reason
and the output tokens) and ``message_stop``. The finish reason maps to ``stop_reason``: stop →
end_turn, tool_calls → tool_use, length → max_tokens (other values verbatim). Default tool ids
are ``toolu_<request>_<index>``.
"""

from __future__ import annotations

import json

from tether.testing import reply
from tether.testing.script import ErrorSpec, JSONObject, Step, ToolCallSpec

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _error_type(status: int) -> str:
    known = _ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(message: str, error_type: str) -> JSONObject:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def step_error_body(error: ErrorSpec) -> JSONObject:
    """The body of a scripted ``error`` step; the type follows the status unless given."""
    return error_body(error.message, error.type or _error_type(error.status))


def tools_unsupported_body(model: str) -> JSONObject:
    return error_body(f"{model} does not support tools", "invalid_request_error")


def _tool_id(call: ToolCallSpec, ordinal: int, index: int) -> str:
    return call.id or f"toolu_{ordinal}_{index}"


def events(step: Step, ordinal: int, model: str, body: JSONObject) -> list[JSONObject]:
    """Every event of a streamed Messages response, in order (each carries its ``type``)."""
    usage = reply.usage(step, body)
    events: list[JSONObject] = [
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{ordinal}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": 1},
            },
        },
        {"type": "ping"},
    ]
    index = 0

    def block(start: JSONObject, deltas: list[JSONObject]) -> None:
        nonlocal index
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events.extend(
            {"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas
        )
        events.append({"type": "content_block_stop", "index": index})
        index += 1

    if step.reasoning is not None:
        thoughts: list[JSONObject] = [
            {"type": "thinking_delta", "thinking": piece} for piece in reply.reasoning_pieces(step)
        ]
        thoughts.append({"type": "signature_delta", "signature": f"scripted-{ordinal}"})
        block({"type": "thinking", "thinking": ""}, thoughts)
    if step.text:
        texts: list[JSONObject] = [
            {"type": "text_delta", "text": piece} for piece in reply.text_pieces(step)
        ]
        block({"type": "text", "text": ""}, texts)
    for number, call in enumerate(step.tool_calls):
        start: JSONObject = {
            "type": "tool_use",
            "id": _tool_id(call, ordinal, number),
            "name": call.name,
            "input": {},
        }
        pieces: list[JSONObject] = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in reply.split_text(call.arguments, 2)
        ]
        block(start, pieces)
    finish = reply.finish_reason(step)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS.get(finish, finish), "stop_sequence": None},
            "usage": {"output_tokens": usage["completion_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def message(step: Step, ordinal: int, model: str, body: JSONObject) -> JSONObject:
    """The whole (non-streamed) ``message`` object."""
    content: list[JSONObject] = []
    if step.reasoning is not None:
        content.append(
            {"type": "thinking", "thinking": step.reasoning, "signature": f"scripted-{ordinal}"}
        )
    if step.text:
        content.append({"type": "text", "text": step.text})
    for number, call in enumerate(step.tool_calls):
        try:
            arguments: object = json.loads(call.arguments)
        except ValueError:
            arguments = {}
        content.append(
            {
                "type": "tool_use",
                "id": _tool_id(call, ordinal, number),
                "name": call.name,
                "input": arguments,
            }
        )
    usage = reply.usage(step, body)
    finish = reply.finish_reason(step)
    return {
        "id": f"msg_{ordinal}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASONS.get(finish, finish),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        },
    }
