"""A scripted fake model server speaking OpenAI chat completions and Anthropic Messages.

Each POST to ``/v1/chat/completions`` (OpenAI) or ``/v1/messages`` (Anthropic) consumes the
next step of one script, so a daemon pointed at this server behaves deterministically, whichever
dialect it speaks. It is used by tether's own tests and benchmarks and is meant for plugin
authors too, which is why it depends on the standard library only.

A script is a JSON object (or the same shape as a Python dict)::

    {
      "model": "scripted",          # optional; what /v1/models reports and responses carry
      "loop": false,                # optional; when true the steps repeat forever
      "tool_support": "native",     # optional; "none" plays a model without tool support
      "steps": [
        {"text": "Hello there", "chunks": 3},
        {"reasoning": "Let me look.", "text": "Looking."},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
        {"tool_calls": [{"name": "read_file", "arguments_raw": "{not json", "id": "call_x"}]},
        {"text": "cut off", "finish_reason": "length"},
        {"error": {"status": 429, "retry_after": "2", "message": "slow down"}},
        {"text": "partial", "drop_after_chunks": 1},
        {"text": "one bad line", "malformed_after_chunks": 1},
        {"page": {"body": "<html>Sign in</html>", "content_type": "text/html"}},
        {"text": "slow", "delay_ms": 200, "chunk_delay_ms": 50},
        {"text": "x", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
      ]
    }

Step keys:

``text``
    Assistant content. Streamed in ``chunks`` roughly equal pieces (default: ~20 characters
    per piece).
``reasoning``
    Reasoning streamed before the text (~20 characters per piece): ``reasoning_content``
    deltas (OpenAI) or a ``thinking`` block with a signature (Anthropic).
``tool_calls``
    A list of ``{"name", "arguments" | "arguments_raw", "id"?}``. ``arguments`` (an object) is
    sent as compact JSON, ``arguments_raw`` (a string) verbatim. The default id is
    ``call_<request>_<index>`` (OpenAI) or ``toolu_<request>_<index>`` (Anthropic) where
    ``<request>`` counts answered requests from 0 (so ids stay unique in loop mode). Streamed
    after the text. OpenAI: one delta with index, id, type and name, then the arguments string
    in two deltas. Anthropic: a ``tool_use`` block per call whose input arrives in two
    ``input_json_delta`` fragments.
``finish_reason``
    Defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``. Anthropic
    responses carry it as ``stop_reason``: stop → end_turn, tool_calls → tool_use, length →
    max_tokens (other values verbatim).
``usage``
    ``{"prompt_tokens"?, "completion_tokens"?, "total_tokens"?}``. Missing counts are
    estimated as characters / 4 (at least 1) of the request messages and of the response.
    Anthropic responses report them as ``input_tokens`` (in ``message_start``) and
    ``output_tokens`` (in ``message_delta``).
``error``
    ``{"status", "message"?, "retry_after"?, "type"?, "code"?}``: answer with that HTTP status,
    a ``Retry-After`` header when given and an error body in the request's dialect: OpenAI
    ``{"error": {"message", "type", "code"?}}``, Anthropic ``{"type": "error", "error":
    {"type", "message"}}``. The default ``type`` follows the status (Anthropic: 429
    rate_limit_error, 529 overloaded_error, 5xx api_error, …). Only ``delay_ms`` may be
    combined with it.
``drop_after_chunks``
    Send that many SSE events, then close the connection without finishing the chunked body
    (clients see an incomplete read). For a non-streaming request, half the body is sent.
``malformed_after_chunks``
    After that many SSE events, send one ``data:`` line that is not JSON, then the rest of
    the stream as usual (streamed requests only).
``page``
    ``{"body", "content_type"?}``: answer HTTP 200 with this body instead of a model
    response, as a proxy's sign-in page or a web server at the wrong URL does; the content
    type defaults to ``text/html; charset=utf-8``. Only ``delay_ms`` may be combined with it.
``delay_ms`` / ``chunk_delay_ms``
    Wait before sending the response headers / between streamed events.

Script keys besides ``steps``: ``model``, ``loop``, and ``tool_support``: ``"native"``
(default) or ``"none"``, a model without tool support: a request that offers ``tools`` is
refused with HTTP 400 saying the model "does not support tools" (Ollama's words; recorded, but
it consumes no step), and steps answer requests without tools by writing their ``tool_calls``
as ``<tool_call>{"name": …, "arguments": …}</tool_call>`` blocks after the text, with no native
calls — what tether's text tool-call fallback reads.

Anthropic requests are checked the way the Messages API checks them (``max_tokens``,
non-empty blocks, every ``tool_result`` answering a ``tool_use`` of the message before, results
before other content) and, more strictly than the API, user and assistant must alternate; a bad
request gets a 400 ``invalid_request_error`` naming the problem, is recorded and consumes no
step.

Introspection endpoints: ``GET /_tether/requests`` (every model request body received, either
dialect, in order), ``GET /_tether/headers`` (the headers of those requests, names in lower
case, in the same order), ``POST /_tether/script`` (replace the script, reset the step counter
and the recorded requests), ``GET /_tether/health``. ``GET /v1/models`` lists the script's
model in the OpenAI shape, or the Anthropic one when the request has an ``anthropic-version``
header.

Base URLs: ``ModelServer.base_url`` (``http://HOST:PORT/v1``) is the OpenAI base URL;
tether's Anthropic client takes it too, or the root ``ModelServer.url``.

Command line::

    python -m tether.testing --script FILE [--host H] [--port P]
        [--port-file PATH]

prints ``tether model server listening on http://HOST:PORT/v1`` once ready and serves until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, cast

__all__ = [
    "ErrorSpec",
    "ModelServer",
    "PageSpec",
    "Script",
    "ScriptError",
    "Step",
    "ToolCallSpec",
    "UsageSpec",
    "load_script",
    "main",
    "parse_script",
]

JSONObject = dict[str, Any]

DEFAULT_MODEL = "scripted"
DEFAULT_CHUNK_CHARS = 20

_SCRIPT_KEYS = frozenset({"model", "loop", "steps", "tool_support"})
_TOOL_SUPPORT = ("native", "none")
_STEP_KEYS = frozenset(
    {
        "text",
        "reasoning",
        "chunks",
        "tool_calls",
        "finish_reason",
        "error",
        "drop_after_chunks",
        "delay_ms",
        "chunk_delay_ms",
        "usage",
        "malformed_after_chunks",
        "page",
    }
)
_TOOL_CALL_KEYS = frozenset({"name", "arguments", "arguments_raw", "id"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
_ERROR_KEYS = frozenset({"status", "message", "retry_after", "type", "code"})
_ERROR_COMPATIBLE_KEYS = frozenset({"error", "delay_ms"})
_PAGE_KEYS = frozenset({"body", "content_type"})
_PAGE_COMPATIBLE_KEYS = frozenset({"page", "delay_ms"})
DEFAULT_PAGE_TYPE = "text/html; charset=utf-8"
MALFORMED_LINE = b'data: {"choices": [{"delta": {"content": "unfinished\n\n'
"""What ``malformed_after_chunks`` sends: a ``data:`` line cut inside its JSON."""


# --------------------------------------------------------------------------------------------
# Script representation and validation


class ScriptError(ValueError):
    """A script that does not have the documented shape; the message names the step and key."""


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    name: str
    arguments: str
    """The exact arguments string sent on the wire (compact JSON or ``arguments_raw``)."""
    id: str | None = None


@dataclass(frozen=True, slots=True)
class UsageSpec:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    status: int
    message: str
    type: str | None = None
    """None: the dialect's usual type for the status."""
    retry_after: str | None = None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class PageSpec:
    body: str
    content_type: str = DEFAULT_PAGE_TYPE


@dataclass(frozen=True, slots=True)
class Step:
    text: str | None = None
    reasoning: str | None = None
    chunks: int | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str | None = None
    error: ErrorSpec | None = None
    drop_after_chunks: int | None = None
    delay_ms: float = 0.0
    chunk_delay_ms: float = 0.0
    usage: UsageSpec | None = None
    malformed_after_chunks: int | None = None
    page: PageSpec | None = None


@dataclass(frozen=True, slots=True)
class Script:
    steps: tuple[Step, ...]
    model: str = DEFAULT_MODEL
    loop: bool = False
    tool_support: str = "native"
    """``native``, or ``none``: a model without tool support (see the module docstring)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Script:
        return parse_script(data)


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _check_keys(where: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in data:
        if key not in allowed:
            expected = ", ".join(sorted(allowed))
            raise ScriptError(f"{where}: unknown key {key!r} (expected one of: {expected})")


def _as_mapping(where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScriptError(f"{where} must be an object, got {_type_name(value)}")
    mapping = cast(Mapping[Any, Any], value)
    for key in mapping:
        if not isinstance(key, str):
            raise ScriptError(f"{where}: keys must be strings, got {_type_name(key)}")
    return cast(Mapping[str, Any], mapping)


def _get_str(where: str, data: Mapping[str, Any], key: str, *, nonempty: bool = False) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise ScriptError(f"{where}: {key!r} must be a string, got {_type_name(value)}")
    if nonempty and not value:
        raise ScriptError(f"{where}: {key!r} must not be empty")
    return value


def _get_int(where: str, data: Mapping[str, Any], key: str, *, minimum: int) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScriptError(f"{where}: {key!r} must be an integer, got {_type_name(value)}")
    if value < minimum:
        raise ScriptError(f"{where}: {key!r} must be >= {minimum}, got {value}")
    return value


def _get_ms(where: str, data: Mapping[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScriptError(f"{where}: {key!r} must be a number, got {_type_name(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ScriptError(f"{where}: {key!r} must be a finite number >= 0, got {value}")
    return number


def _parse_tool_call(where: str, value: object) -> ToolCallSpec:
    data = _as_mapping(where, value)
    _check_keys(where, data, _TOOL_CALL_KEYS)
    if "name" not in data:
        raise ScriptError(f"{where}: missing required key 'name'")
    name = _get_str(where, data, "name", nonempty=True)
    call_id = _get_str(where, data, "id", nonempty=True) if "id" in data else None
    if "arguments" in data and "arguments_raw" in data:
        raise ScriptError(f"{where}: give either 'arguments' or 'arguments_raw', not both")
    if "arguments_raw" in data:
        arguments = _get_str(where, data, "arguments_raw")
    else:
        raw_args: object = data.get("arguments", {})
        args = _as_mapping(f"{where}: 'arguments'", raw_args)
        try:
            arguments = json.dumps(args, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ScriptError(f"{where}: 'arguments' is not JSON-encodable: {exc}") from exc
    return ToolCallSpec(name=name, arguments=arguments, id=call_id)


def _parse_usage(where: str, value: object) -> UsageSpec:
    data = _as_mapping(where, value)
    _check_keys(where, data, _USAGE_KEYS)
    counts = {key: _get_int(where, data, key, minimum=0) for key in _USAGE_KEYS if key in data}
    return UsageSpec(**counts)


def _default_error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _parse_error(where: str, value: object) -> ErrorSpec:
    data = _as_mapping(where, value)
    _check_keys(where, data, _ERROR_KEYS)
    if "status" not in data:
        raise ScriptError(f"{where}: missing required key 'status'")
    status = _get_int(where, data, "status", minimum=400)
    if status > 599:
        raise ScriptError(f"{where}: 'status' must be an HTTP error status (400-599), got {status}")
    message = _get_str(where, data, "message") if "message" in data else f"scripted error {status}"
    error_type = _get_str(where, data, "type", nonempty=True) if "type" in data else None
    retry_after: str | None = None
    if "retry_after" in data:
        raw = data["retry_after"]
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
            retry_after = str(raw)
        else:
            retry_after = _get_str(where, data, "retry_after", nonempty=True)
    code = _get_str(where, data, "code", nonempty=True) if "code" in data else None
    return ErrorSpec(
        status=status, message=message, type=error_type, retry_after=retry_after, code=code
    )


def _parse_step(index: int, value: object) -> Step:
    where = f"script step {index}"
    data = _as_mapping(where, value)
    _check_keys(where, data, _STEP_KEYS)

    if "page" in data:
        for key in data:
            if key not in _PAGE_COMPATIBLE_KEYS:
                raise ScriptError(
                    f"{where}: key {key!r} cannot be combined with 'page' (only 'delay_ms' can)"
                )
        page = _as_mapping(f"{where}: 'page'", data["page"])
        _check_keys(f"{where}: 'page'", page, _PAGE_KEYS)
        if "body" not in page:
            raise ScriptError(f"{where}: 'page': missing required key 'body'")
        return Step(
            page=PageSpec(
                body=_get_str(f"{where}: 'page'", page, "body"),
                content_type=(
                    _get_str(f"{where}: 'page'", page, "content_type", nonempty=True)
                    if "content_type" in page
                    else DEFAULT_PAGE_TYPE
                ),
            ),
            delay_ms=_get_ms(where, data, "delay_ms") if "delay_ms" in data else 0.0,
        )
    if "error" in data:
        for key in data:
            if key not in _ERROR_COMPATIBLE_KEYS:
                raise ScriptError(
                    f"{where}: key {key!r} cannot be combined with 'error' (only 'delay_ms' can)"
                )
        return Step(
            error=_parse_error(f"{where}: 'error'", data["error"]),
            delay_ms=_get_ms(where, data, "delay_ms") if "delay_ms" in data else 0.0,
        )

    text = _get_str(where, data, "text") if "text" in data else None
    reasoning = _get_str(where, data, "reasoning") if "reasoning" in data else None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    if "tool_calls" in data:
        raw_calls: object = data["tool_calls"]
        if not isinstance(raw_calls, list | tuple):
            raise ScriptError(f"{where}: 'tool_calls' must be a list, got {_type_name(raw_calls)}")
        calls = cast(Sequence[object], raw_calls)
        if not calls:
            raise ScriptError(f"{where}: 'tool_calls' must not be empty")
        tool_calls = tuple(
            _parse_tool_call(f"{where}: tool_calls[{i}]", call) for i, call in enumerate(calls)
        )
    if text is None and reasoning is None and not tool_calls:
        raise ScriptError(
            f"{where}: needs at least one of 'text', 'reasoning', 'tool_calls' or 'error'"
        )

    chunks: int | None = None
    if "chunks" in data:
        if text is None:
            raise ScriptError(f"{where}: 'chunks' needs 'text'")
        chunks = _get_int(where, data, "chunks", minimum=1)
    return Step(
        text=text,
        reasoning=reasoning,
        chunks=chunks,
        tool_calls=tool_calls,
        finish_reason=(
            _get_str(where, data, "finish_reason", nonempty=True)
            if "finish_reason" in data
            else None
        ),
        drop_after_chunks=(
            _get_int(where, data, "drop_after_chunks", minimum=0)
            if "drop_after_chunks" in data
            else None
        ),
        malformed_after_chunks=(
            _get_int(where, data, "malformed_after_chunks", minimum=0)
            if "malformed_after_chunks" in data
            else None
        ),
        delay_ms=_get_ms(where, data, "delay_ms") if "delay_ms" in data else 0.0,
        chunk_delay_ms=_get_ms(where, data, "chunk_delay_ms") if "chunk_delay_ms" in data else 0.0,
        usage=_parse_usage(f"{where}: 'usage'", data["usage"]) if "usage" in data else None,
    )


def parse_script(data: object) -> Script:
    """Validate a script given as parsed JSON.

    Raises `ScriptError` (a `ValueError`) whose message names the bad step index and key.
    """
    script = _as_mapping("script", data)
    _check_keys("script", script, _SCRIPT_KEYS)
    if "steps" not in script:
        raise ScriptError("script: missing required key 'steps'")
    raw_steps: object = script["steps"]
    if not isinstance(raw_steps, list | tuple):
        raise ScriptError(f"script: 'steps' must be a list, got {_type_name(raw_steps)}")
    steps = tuple(_parse_step(i, step) for i, step in enumerate(cast(Sequence[object], raw_steps)))
    model = _get_str("script", script, "model", nonempty=True) if "model" in script else None
    loop = False
    if "loop" in script:
        raw_loop: object = script["loop"]
        if not isinstance(raw_loop, bool):
            raise ScriptError(f"script: 'loop' must be a boolean, got {_type_name(raw_loop)}")
        loop = raw_loop
    if loop and not steps:
        raise ScriptError("script: 'loop' needs at least one step")
    tool_support = "native"
    if "tool_support" in script:
        tool_support = _get_str("script", script, "tool_support")
        if tool_support not in _TOOL_SUPPORT:
            raise ScriptError(
                f"script: 'tool_support' must be one of {', '.join(_TOOL_SUPPORT)},"
                f" got {tool_support!r}"
            )
    return Script(steps=steps, model=model or DEFAULT_MODEL, loop=loop, tool_support=tool_support)


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and validate a script file; raise `ScriptError` (a `ValueError`) if it is bad."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data: object = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{os.fspath(path)}: not valid JSON: {exc}") from exc
    try:
        return parse_script(data)
    except ValueError as exc:
        raise ScriptError(f"{os.fspath(path)}: {exc}") from exc


def _coerce_script(script: Mapping[str, Any] | Script) -> Script:
    return script if isinstance(script, Script) else parse_script(script)


# --------------------------------------------------------------------------------------------
# Response construction (pure functions)


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


def _text_pieces(step: Step) -> list[str]:
    text = step.text or ""
    count = step.chunks or math.ceil(len(text) / DEFAULT_CHUNK_CHARS)
    return split_text(text, count)


def _call_id(call: ToolCallSpec, ordinal: int, index: int) -> str:
    return call.id or f"call_{ordinal}_{index}"


def _finish_reason(step: Step) -> str:
    if step.finish_reason is not None:
        return step.finish_reason
    return "tool_calls" if step.tool_calls else "stop"


def _reasoning_pieces(step: Step) -> list[str]:
    text = step.reasoning or ""
    return split_text(text, math.ceil(len(text) / DEFAULT_CHUNK_CHARS))


def _text_tool_step(step: Step) -> Step:
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


def _stream_deltas(step: Step, ordinal: int) -> list[JSONObject]:
    deltas: list[JSONObject] = [{"reasoning_content": piece} for piece in _reasoning_pieces(step)]
    deltas += [{"content": piece} for piece in _text_pieces(step)]
    for index, call in enumerate(step.tool_calls):
        header: JSONObject = {
            "index": index,
            "id": _call_id(call, ordinal, index),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        deltas.append({"tool_calls": [header]})
        for piece in split_text(call.arguments, 2):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if not deltas:
        deltas.append({"content": ""})
    deltas[0] = {"role": "assistant", **deltas[0]}
    return deltas


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


def _usage(step: Step, body: JSONObject) -> JSONObject:
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


def _completion_id(ordinal: int) -> str:
    return f"chatcmpl-{ordinal}"


def _stream_events(
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
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": _finish_reason(step)}]))
    options: Any = body.get("stream_options")
    if isinstance(options, dict) and cast(dict[str, Any], options).get("include_usage") is True:
        usage_event = chunk([])
        usage_event["usage"] = _usage(step, body)
        events.append(usage_event)
    return events


def _completion(step: Step, ordinal: int, model: str, body: JSONObject, created: int) -> JSONObject:
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
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(step)}],
        "usage": _usage(step, body),
    }


def _error_body(message: str, error_type: str | None, code: str | None = None) -> JSONObject:
    error: JSONObject = {"message": message, "type": error_type or "invalid_request_error"}
    if code is not None:
        error["code"] = code
    return {"error": error}


def _step_error_body(error: ErrorSpec, dialect: str) -> JSONObject:
    if dialect == ANTHROPIC:
        return _anthropic_error_body(
            error.message, error.type or _anthropic_error_type(error.status)
        )
    return _error_body(error.message, error.type or _default_error_type(error.status), error.code)


def _tools_unsupported_body(dialect: str, model: str) -> JSONObject:
    if dialect == ANTHROPIC:
        return _anthropic_error_body(f"{model} does not support tools", "invalid_request_error")
    message = f"registry.ollama.ai/library/{model} does not support tools"
    return {"error": {"message": message, "type": "api_error", "param": None, "code": None}}


# ---- Anthropic Messages

ANTHROPIC = "anthropic"
OPENAI = "openai"

_ANTHROPIC_ERROR_TYPES = {
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


def _anthropic_error_type(status: int) -> str:
    known = _ANTHROPIC_ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


def _anthropic_error_body(message: str, error_type: str) -> JSONObject:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _anthropic_tool_id(call: ToolCallSpec, ordinal: int, index: int) -> str:
    return call.id or f"toolu_{ordinal}_{index}"


def _anthropic_events(step: Step, ordinal: int, model: str, body: JSONObject) -> list[JSONObject]:
    """Every event of a streamed Messages response, in order (each carries its ``type``)."""
    usage = _usage(step, body)
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
            {"type": "thinking_delta", "thinking": piece} for piece in _reasoning_pieces(step)
        ]
        thoughts.append({"type": "signature_delta", "signature": f"scripted-{ordinal}"})
        block({"type": "thinking", "thinking": ""}, thoughts)
    if step.text:
        texts: list[JSONObject] = [
            {"type": "text_delta", "text": piece} for piece in _text_pieces(step)
        ]
        block({"type": "text", "text": ""}, texts)
    for number, call in enumerate(step.tool_calls):
        start: JSONObject = {
            "type": "tool_use",
            "id": _anthropic_tool_id(call, ordinal, number),
            "name": call.name,
            "input": {},
        }
        pieces: list[JSONObject] = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in split_text(call.arguments, 2)
        ]
        block(start, pieces)
    finish = _finish_reason(step)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS.get(finish, finish), "stop_sequence": None},
            "usage": {"output_tokens": usage["completion_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _anthropic_message(step: Step, ordinal: int, model: str, body: JSONObject) -> JSONObject:
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
                "id": _anthropic_tool_id(call, ordinal, number),
                "name": call.name,
                "input": arguments,
            }
        )
    usage = _usage(step, body)
    finish = _finish_reason(step)
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


def _encode(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------
# Shared state and the HTTP server


class _State:
    """The script, the step counter and the recorded requests, shared by handler threads."""

    def __init__(self, script: Script) -> None:
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        """Notified whenever a request is recorded."""
        self.script = script
        self.position = 0
        self.requests: list[JSONObject] = []
        self.headers: list[dict[str, str]] = []
        self.stopping = threading.Event()

    def set_script(self, script: Script) -> None:
        with self.lock:
            self.script = script
            self.position = 0
            self.requests = []
            self.headers = []

    def record(self, body: JSONObject, headers: dict[str, str]) -> None:
        """Record a request that takes no step (one refused before the script is consulted)."""
        with self.lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.arrived.notify_all()

    def take(self, body: JSONObject, headers: dict[str, str]) -> tuple[int, Step | None, Script]:
        """Record the request and claim the next step (None when the script is exhausted)."""
        with self.lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.arrived.notify_all()
            script = self.script
            ordinal = self.position
            step: Step | None = None
            if script.loop and script.steps:
                step = script.steps[ordinal % len(script.steps)]
            elif ordinal < len(script.steps):
                step = script.steps[ordinal]
            if step is not None:
                self.position += 1
            return ordinal, step, script

    def recorded(self) -> list[JSONObject]:
        with self.lock:
            return copy.deepcopy(self.requests)

    def wait_recorded(self, count: int, timeout: float) -> list[JSONObject]:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(
                    f"{len(self.requests)} model requests arrived within {timeout} s, not {count}"
                )
            return copy.deepcopy(self.requests)

    def recorded_headers(self) -> list[dict[str, str]]:
        with self.lock:
            return [dict(headers) for headers in self.headers]

    def sleep_ms(self, milliseconds: float) -> bool:
        """Wait; return False if the server is stopping (the caller should give up)."""
        if milliseconds <= 0:
            return not self.stopping.is_set()
        return not self.stopping.wait(milliseconds / 1000)


_Request = socket.socket | tuple[bytes, socket.socket]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], state: _State, family: socket.AddressFamily
    ) -> None:
        self.address_family = family
        self.state = state
        self._connections_lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name with getfqdn(), which can stall on hosts
        # with slow reverse DNS; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: _Request, client_address: Any) -> None:
        # Like ThreadingMixIn, but keeps track of open connections so stop() can end them.
        sock = request if isinstance(request, socket.socket) else request[1]
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address, sock),
            name=f"model-server-conn-{client_address}",
            daemon=True,
        )
        with self._connections_lock:
            self._connections[sock] = thread
        thread.start()

    def _serve_connection(
        self, request: _Request, client_address: Any, sock: socket.socket
    ) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._connections_lock:
                self._connections.pop(sock, None)

    def handle_error(self, request: _Request, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError) or self.state.stopping.is_set():
            return  # a client went away or we are shutting down: nothing worth reporting
        super().handle_error(request, client_address)

    def close_connections(self, timeout: float) -> None:
        with self._connections_lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in connections:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "TetherModelServer/1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    @property
    def _state(self) -> _State:
        return cast(_Server, self.server).state

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # ---- plumbing

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length", "0") or "0")
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _send_json(
        self, status: int, payload: object, headers: Mapping[str, str] | None = None
    ) -> None:
        data = _encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error_json(self, status: int, message: str, error_type: str) -> None:
        self._send_json(status, _error_body(message, error_type))

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _request_headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    # ---- routing

    def do_GET(self) -> None:
        path = self._path()
        if path == "/v1/models":
            model = self._state.script.model
            if "anthropic-version" in self.headers:
                entry = {"id": model, "type": "model", "display_name": model}
                listing: JSONObject = {
                    "data": [entry],
                    "has_more": False,
                    "first_id": model,
                    "last_id": model,
                }
            else:
                entry = {"id": model, "object": "model", "owned_by": "tether"}
                listing = {"object": "list", "data": [entry]}
            self._send_json(200, listing)
        elif path == "/_tether/requests":
            self._send_json(200, self._state.recorded())
        elif path == "/_tether/headers":
            self._send_json(200, self._state.recorded_headers())
        elif path == "/_tether/health":
            self._send_json(200, {"ok": True})
        else:
            self._not_found("GET", path)

    def do_POST(self) -> None:
        path = self._path()
        try:
            raw = self._read_body()
        except ValueError:
            self.close_connection = True
            self._send_error_json(400, "malformed request body framing", "invalid_request_error")
            return
        if path == "/v1/chat/completions":
            self._chat_completions(raw)
        elif path == "/v1/messages":
            self._messages(raw)
        elif path == "/_tether/script":
            self._replace_script(raw)
        else:
            self._not_found("POST", path)

    def _not_found(self, method: str, path: str) -> None:
        self._send_error_json(404, f"no route for {method} {path}", "invalid_request_error")

    def _parse_json_object(self, raw: bytes) -> JSONObject | None:
        try:
            body: object = json.loads(raw)
        except ValueError as exc:
            self._send_error_json(400, f"invalid JSON body: {exc}", "invalid_request_error")
            return None
        if not isinstance(body, dict):
            message = f"request body must be a JSON object, got {_type_name(body)}"
            self._send_error_json(400, message, "invalid_request_error")
            return None
        return cast(JSONObject, body)

    def _replace_script(self, raw: bytes) -> None:
        data = self._parse_json_object(raw)
        if data is None:
            return
        try:
            script = parse_script(data)
        except ValueError as exc:
            self._send_error_json(400, str(exc), "invalid_request_error")
            return
        self._state.set_script(script)
        self._send_json(200, {"ok": True, "steps": len(script.steps)})

    # ---- chat completions

    def _chat_completions(self, raw: bytes) -> None:
        body = self._parse_json_object(raw)
        if body is not None:
            self._answer(body, OPENAI)

    def _messages(self, raw: bytes) -> None:
        try:
            data: object = json.loads(raw)
        except ValueError as exc:
            self._send_json(
                400, _anthropic_error_body(f"invalid JSON body: {exc}", "invalid_request_error")
            )
            return
        body = cast(JSONObject, data) if isinstance(data, dict) else None
        problem = (
            "request body must be a JSON object"
            if body is None
            else anthropic_request_problem(body)
        )
        if problem is not None:
            self._state.record(
                body if body is not None else {"invalid": data}, self._request_headers()
            )
            self._send_json(400, _anthropic_error_body(problem, "invalid_request_error"))
            return
        assert body is not None
        self._answer(body, ANTHROPIC)

    def _answer(self, body: JSONObject, dialect: str) -> None:
        state = self._state
        if state.script.tool_support == "none" and body.get("tools"):
            # Like a model without tool support: refused, and the step stays for the retry.
            state.record(body, self._request_headers())
            model = body.get("model")
            name = model if isinstance(model, str) and model else state.script.model
            self._send_json(400, _tools_unsupported_body(dialect, name))
            return
        ordinal, step, script = state.take(body, self._request_headers())
        if step is None:
            message = f"model script exhausted after {len(script.steps)} steps"
            if dialect == ANTHROPIC:
                self._send_json(500, _anthropic_error_body(message, "api_error"))
            else:
                self._send_error_json(500, message, "server_error")
            return
        if not state.sleep_ms(step.delay_ms):
            self.close_connection = True
            return
        if step.error is not None:
            error = step.error
            headers = {"Retry-After": error.retry_after} if error.retry_after is not None else {}
            self._send_json(error.status, _step_error_body(error, dialect), headers)
            return
        if step.page is not None:
            self._send_page(step.page)
            return
        if script.tool_support == "none":
            step = _text_tool_step(step)
        created = int(time.time())
        streamed = body.get("stream") is True
        try:
            if dialect == ANTHROPIC and streamed:
                events = _anthropic_events(step, ordinal, script.model, body)
                frames = [
                    b"event: %s\ndata: %s\n\n" % (str(e["type"]).encode(), _encode(e))
                    for e in events
                ]
                self._stream(step, frames)
            elif dialect == ANTHROPIC:
                self._respond_whole(
                    step, _encode(_anthropic_message(step, ordinal, script.model, body))
                )
            elif streamed:
                events = _stream_events(step, ordinal, script.model, body, created)
                frames = [b"data: " + _encode(e) + b"\n\n" for e in events]
                self._stream(step, frames, b"data: [DONE]\n\n")
            else:
                completion = _completion(step, ordinal, script.model, body, created)
                self._respond_whole(step, _encode(completion))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_page(self, page: PageSpec) -> None:
        data = page.body.encode()
        self.send_response(200)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _respond_whole(self, step: Step, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if step.drop_after_chunks is None:
            self.wfile.write(data)
            return
        self.wfile.write(data[: len(data) // 2])
        self._drop()

    def _stream(self, step: Step, frames: list[bytes], final: bytes = b"") -> None:
        """Send each SSE frame as an HTTP chunk (honouring drop_after_chunks and
        chunk_delay_ms), then `final`, then the end of the body."""
        state = self._state
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        limit = step.drop_after_chunks
        for sent, frame in enumerate(frames):
            if limit is not None and sent >= limit:
                self._drop()
                return
            if sent and not state.sleep_ms(step.chunk_delay_ms):
                self._drop()
                return
            if sent == step.malformed_after_chunks:
                self._write_chunk(MALFORMED_LINE)
            self._write_chunk(frame)
        if step.malformed_after_chunks is not None and step.malformed_after_chunks >= len(frames):
            self._write_chunk(MALFORMED_LINE)
        if limit is not None:
            self._drop()
            return
        if final:
            self._write_chunk(final)
        self.wfile.write(b"0\r\n\r\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _drop(self) -> None:
        """End the connection mid-response, without completing the body."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------------------------
# Public API


class ModelServer:
    """A scripted model server (OpenAI chat completions and Anthropic Messages) on a
    background thread.

    >>> with ModelServer({"steps": [{"text": "hi"}]}) as server:
    ...     base_url = server.base_url  # "http://127.0.0.1:PORT/v1"
    """

    def __init__(
        self, script: Mapping[str, Any] | Script, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._state = _State(_coerce_script(script))
        self._host = host
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ModelServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("ModelServer is already running")
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        self._state.stopping.clear()
        server = _Server((self._host, self._requested_port), self._state, family)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="model-server",
            daemon=True,
        )
        self._server = server
        self._thread = thread
        thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end open connections and release the port. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = None
        self._thread = None
        self._state.stopping.set()
        server.shutdown()
        server.close_connections(timeout=2.0)
        server.server_close()
        thread.join()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ModelServer is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:PORT``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def script(self) -> Script:
        return self._state.script

    @property
    def requests(self) -> list[JSONObject]:
        """Copies of every model request body received so far (either dialect), in order."""
        return self._state.recorded()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[JSONObject]:
        """Block until at least `count` requests have arrived (since the last `set_script`)
        and return copies of them; `TimeoutError` after `timeout` seconds."""
        return self._state.wait_recorded(count, timeout)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers of those requests (names in lower case), in the same order."""
        return self._state.recorded_headers()

    def set_script(self, script: Mapping[str, Any] | Script) -> None:
        """Replace the script; resets the step counter and the recorded requests."""
        self._state.set_script(_coerce_script(script))

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# Command line


def _write_port_file(path: str, port: int) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    tmp.replace(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing",
        description="Serve a scripted fake model (OpenAI chat completions, Anthropic Messages).",
    )
    parser.add_argument("--script", required=True, help="path of the JSON script")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--port-file", help="write the bound port to this file once listening")
    args = parser.parse_args(argv)
    script_path = cast(str, args.script)
    host = cast(str, args.host)
    port = cast(int, args.port)
    port_file = cast("str | None", args.port_file)

    try:
        script = load_script(script_path)
    except (OSError, ValueError) as exc:
        print(f"model_server: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous: dict[signal.Signals, Any] = {}
    if in_main_thread:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    server = ModelServer(script, host=host, port=port)
    try:
        try:
            server.start()
        except OSError as exc:
            print(f"model_server: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        if port_file:
            _write_port_file(port_file, server.port)
        print(f"tether model server listening on {server.base_url}", flush=True)
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
