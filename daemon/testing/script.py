"""The script format of the scripted model server, and its validation.

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
``match``
    A string: the step answers only a request whose first user message contains it (its
    text, in either dialect). A request takes the first step, in script order, that no
    earlier request took and that it matches (a step without ``match`` matches every
    request), so the requests of several conversations served at once — an agent and its
    subagents — each follow their own steps whatever order they arrive in. A request that
    no step left matches is answered as an exhausted script; in loop mode the steps start
    over once none left in this round matches.
``hold_at_chunks``
    ``[n, ...]``, ascending: after sending n SSE events, wait for the test to let the stream
    go on (``ModelServer.release``), so that it can act mid-stream without racing the stream.
    The k-th hold of a stream waits until ``release`` has been called k times since the
    script was set (streamed requests only).

Script keys besides ``steps``: ``model``, ``loop``, and ``tool_support``: ``"native"``
(default) or ``"none"``, a model without tool support: a request that offers ``tools`` is
refused with HTTP 400 saying the model "does not support tools" (Ollama's words; recorded, but
it consumes no step), and steps answer requests without tools by writing their ``tool_calls``
as ``<tool_call>{"name": …, "arguments": …}</tool_call>`` blocks after the text, with no native
calls — what tether's text tool-call fallback reads.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

JSONObject = dict[str, Any]

DEFAULT_MODEL = "scripted"

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
        "hold_at_chunks",
        "page",
        "match",
    }
)
_TOOL_CALL_KEYS = frozenset({"name", "arguments", "arguments_raw", "id"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
_ERROR_KEYS = frozenset({"status", "message", "retry_after", "type", "code"})
_ERROR_COMPATIBLE_KEYS = frozenset({"error", "delay_ms", "match"})
_PAGE_KEYS = frozenset({"body", "content_type"})
_PAGE_COMPATIBLE_KEYS = frozenset({"page", "delay_ms", "match"})
DEFAULT_PAGE_TYPE = "text/html; charset=utf-8"


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
    hold_at_chunks: tuple[int, ...] = ()
    page: PageSpec | None = None
    match: str | None = None
    """Only a request whose first user message contains this takes the step."""


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


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _check_keys(where: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in data:
        if key not in allowed:
            expected = ", ".join(sorted(allowed))
            raise ScriptError(f"{where}: unknown key {key!r} (expected one of: {expected})")


def _as_mapping(where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScriptError(f"{where} must be an object, got {type_name(value)}")
    mapping = cast(Mapping[Any, Any], value)
    for key in mapping:
        if not isinstance(key, str):
            raise ScriptError(f"{where}: keys must be strings, got {type_name(key)}")
    return cast(Mapping[str, Any], mapping)


def _get_str(where: str, data: Mapping[str, Any], key: str, *, nonempty: bool = False) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise ScriptError(f"{where}: {key!r} must be a string, got {type_name(value)}")
    if nonempty and not value:
        raise ScriptError(f"{where}: {key!r} must not be empty")
    return value


def _get_int(where: str, data: Mapping[str, Any], key: str, *, minimum: int) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScriptError(f"{where}: {key!r} must be an integer, got {type_name(value)}")
    if value < minimum:
        raise ScriptError(f"{where}: {key!r} must be >= {minimum}, got {value}")
    return value


def _get_ms(where: str, data: Mapping[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScriptError(f"{where}: {key!r} must be a number, got {type_name(value)}")
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
    match = _get_str(where, data, "match", nonempty=True) if "match" in data else None

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
            match=match,
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
            match=match,
        )

    text = _get_str(where, data, "text") if "text" in data else None
    reasoning = _get_str(where, data, "reasoning") if "reasoning" in data else None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    if "tool_calls" in data:
        raw_calls: object = data["tool_calls"]
        if not isinstance(raw_calls, list | tuple):
            raise ScriptError(f"{where}: 'tool_calls' must be a list, got {type_name(raw_calls)}")
        calls = cast(Sequence[object], raw_calls)
        if not calls:
            raise ScriptError(f"{where}: 'tool_calls' must not be empty")
        tool_calls = tuple(
            _parse_tool_call(f"{where}: tool_calls[{i}]", call) for i, call in enumerate(calls)
        )
    if text is None and reasoning is None and not tool_calls:
        raise ScriptError(
            f"{where}: needs at least one of 'text', 'reasoning', 'tool_calls', 'error' or 'page'"
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
        hold_at_chunks=_parse_holds(where, data) if "hold_at_chunks" in data else (),
        delay_ms=_get_ms(where, data, "delay_ms") if "delay_ms" in data else 0.0,
        chunk_delay_ms=_get_ms(where, data, "chunk_delay_ms") if "chunk_delay_ms" in data else 0.0,
        usage=_parse_usage(f"{where}: 'usage'", data["usage"]) if "usage" in data else None,
        match=match,
    )


def _parse_holds(where: str, data: Mapping[str, Any]) -> tuple[int, ...]:
    holds: object = data["hold_at_chunks"]
    if not isinstance(holds, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in cast(list[object], holds)
    ):
        raise ScriptError(f"{where}: 'hold_at_chunks' must be a list of counts (ints >= 0)")
    counts = tuple(cast(list[int], holds))
    if list(counts) != sorted(set(counts)):
        raise ScriptError(f"{where}: 'hold_at_chunks' must be ascending, without repeats")
    return counts


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
        raise ScriptError(f"script: 'steps' must be a list, got {type_name(raw_steps)}")
    steps = tuple(_parse_step(i, step) for i, step in enumerate(cast(Sequence[object], raw_steps)))
    model = _get_str("script", script, "model", nonempty=True) if "model" in script else None
    loop = False
    if "loop" in script:
        raw_loop: object = script["loop"]
        if not isinstance(raw_loop, bool):
            raise ScriptError(f"script: 'loop' must be a boolean, got {type_name(raw_loop)}")
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


def coerce_script(script: Mapping[str, Any] | Script) -> Script:
    return script if isinstance(script, Script) else parse_script(script)


def first_user_text(body: Mapping[str, Any]) -> str:
    """The text of a request's first user message, in either dialect ("" when it has none):
    what a step's ``match`` is looked for in."""
    messages: object = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in cast(list[object], messages):
        if not isinstance(message, dict):
            continue
        entry = cast(Mapping[str, Any], message)
        if entry.get("role") != "user":
            continue
        content: object = entry.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                str(cast(Mapping[str, Any], part).get("text", ""))
                for part in cast(list[object], content)
                if isinstance(part, dict)
            )
        return ""
    return ""
