"""The OpenAI chat-completions dialect: a step as a completion, as SSE chunks, and errors.

Streamed replies send ``reasoning_content`` deltas, then the text, then each tool call as one
delta with index, id, type and name followed by its arguments string in two deltas; a chunk
with the finish reason; a usage chunk when ``stream_options.include_usage`` asks for one.
Default tool-call ids are ``call_<request>_<index>``.
"""

from __future__ import annotations

from typing import Any, cast

from tether.testing import reply
from tether.testing.script import ErrorSpec, JSONObject, Step, ToolCallSpec


def _call_id(call: ToolCallSpec, ordinal: int, index: int) -> str:
    return call.id or f"call_{ordinal}_{index}"


def _completion_id(ordinal: int) -> str:
    return f"chatcmpl-{ordinal}"


def _stream_deltas(step: Step, ordinal: int) -> list[JSONObject]:
    deltas: list[JSONObject] = [
        {"reasoning_content": piece} for piece in reply.reasoning_pieces(step)
    ]
    deltas += [{"content": piece} for piece in reply.text_pieces(step)]
    for index, call in enumerate(step.tool_calls):
        header: JSONObject = {
            "index": index,
            "id": _call_id(call, ordinal, index),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        deltas.append({"tool_calls": [header]})
        for piece in reply.split_text(call.arguments, 2):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if not deltas:
        deltas.append({"content": ""})
    deltas[0] = {"role": "assistant", **deltas[0]}
    return deltas


def stream_events(
    step: Step, ordinal: int, model: str, body: JSONObject, created: int
) -> list[JSONObject]:
    """Every SSE chunk object of a streamed response, in order (without the final [DONE])."""

    def chunk(choices: list[JSONObject]) -> JSONObject:
        return {
            "id": _completion_id(ordinal),
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        }

    events = [
        chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        for delta in _stream_deltas(step, ordinal)
    ]
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": reply.finish_reason(step)}]))
    options: Any = body.get("stream_options")
    if isinstance(options, dict) and cast(dict[str, Any], options).get("include_usage") is True:
        usage_event = chunk([])
        usage_event["usage"] = reply.usage(step, body)
        events.append(usage_event)
    return events


def completion(step: Step, ordinal: int, model: str, body: JSONObject, created: int) -> JSONObject:
    """The whole (non-streamed) ``chat.completion`` object."""
    message: JSONObject = {"role": "assistant", "content": step.text}
    if step.reasoning is not None:
        message["reasoning_content"] = step.reasoning
    if step.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, ordinal, index),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in enumerate(step.tool_calls)
        ]
    return {
        "id": _completion_id(ordinal),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason(step)}],
        "usage": reply.usage(step, body),
    }


def error_body(message: str, error_type: str | None, code: str | None = None) -> JSONObject:
    """``{"error": {"message", "type", "code"?}}``."""
    error: JSONObject = {"message": message, "type": error_type or "invalid_request_error"}
    if code is not None:
        error["code"] = code
    return {"error": error}


def _default_error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def step_error_body(error: ErrorSpec) -> JSONObject:
    """The body of a scripted ``error`` step; the type follows the status unless given."""
    return error_body(error.message, error.type or _default_error_type(error.status), error.code)


def tools_unsupported_body(model: str) -> JSONObject:
    """What Ollama answers when a model without tool support is offered tools."""
    message = f"registry.ollama.ai/library/{model} does not support tools"
    return {"error": {"message": message, "type": "api_error", "param": None, "code": None}}
