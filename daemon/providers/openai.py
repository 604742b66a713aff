"""OpenAI-compatible chat completions, streamed (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter…).

The request body is assembled from pre-encoded messages, so a long conversation costs one
memory copy per step, not a re-encode. httpx errors are mapped to `ModelError`s here, at the
edge, with messages that say what to fix.
"""

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import httpx
import msgspec
import trio

from tether.daemon.providers.base import (
    Message,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelResponse,
    ModelUnreachable,
    ModelUsage,
    StreamCallbacks,
    ToolCallRequest,
    ToolSet,
)

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
CHARS_PER_TOKEN = 3.5


class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _WireToolCall(msgspec.Struct):
    id: str
    function: _Function
    type: str = "function"


class _WireMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None
    tool_call_id: str | None = None


DIALECT = "openai"


def encode_message(message: Message) -> msgspec.Raw:
    """The chat-completions form of a message, encoded once and kept on the message."""
    cached = message.cache.get(DIALECT)
    if cached is not None:
        return cached
    if message.role == "assistant":
        wire = _WireMessage(
            role="assistant",
            content=message.content or None,
            tool_calls=[
                _WireToolCall(id=c.id, function=_Function(name=c.name, arguments=c.arguments))
                for c in message.tool_calls
            ]
            or None,
        )
    elif message.role == "tool":
        wire = _WireMessage(role="tool", content=message.content, tool_call_id=message.tool_call_id)
    else:
        wire = _WireMessage(role=message.role, content=message.content)
    raw = message.cache[DIALECT] = msgspec.Raw(_encoder.encode(wire))
    return raw


def encode_tools(tools: ToolSet) -> msgspec.Raw:
    cached = tools.cache.get(DIALECT)
    if cached is None:
        cached = tools.cache[DIALECT] = msgspec.Raw(
            _encoder.encode(
                [
                    {
                        "type": "function",
                        "function": {
                            "name": spec.name,
                            "description": spec.description,
                            "parameters": spec.parameters,
                        },
                    }
                    for spec in tools.specs
                ]
            )
        )
    return cached


class _Body(msgspec.Struct, omit_defaults=True):
    model: str
    messages: list[msgspec.Raw]
    stream: bool
    stream_options: dict[str, bool] | None = None
    tools: msgspec.Raw | None = None


class _ModelEntry(msgspec.Struct):
    id: str


class _ModelList(msgspec.Struct):
    data: list[_ModelEntry] = []


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_models_decoder = msgspec.json.Decoder(_ModelList)
_encoder = msgspec.json.Encoder()


class _ToolCallBuilder:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class OpenAIChatClient:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        silence_timeout: float = 300.0,
        config_hint: str = "config.toml",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._config_hint = config_hint
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(connect=10.0, read=silence_timeout, write=30.0, pool=10.0),
            transport=transport,
            trust_env=False,
        )

    provider = "openai"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def list_models(self) -> list[str]:
        try:
            response = await self._http.get(f"{self.base_url}/models", timeout=5.0)
        except httpx.HTTPError as exc:
            raise ModelUnreachable(
                f"Could not list models at {self.base_url}: {exc}", retryable=True
            ) from exc
        if response.status_code >= 400:
            raise self._http_error(response)
        try:
            listing = _models_decoder.decode(response.content)
        except msgspec.DecodeError as exc:
            raise ModelProtocolError(f"{self.base_url}/models answered: {exc}") from exc
        return sorted(entry.id for entry in listing.data)

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        body = _encoder.encode(
            _Body(
                model=self.model,
                messages=[encode_message(m) for m in request.messages],
                stream=True,
                stream_options={"include_usage": True},
                tools=encode_tools(request.tools)
                if request.tools and request.tools.specs
                else None,
            )
        )
        url = f"{self.base_url}/chat/completions"
        try:
            async with self._http.stream(
                "POST", url, content=body, headers={"Content-Type": "application/json"}
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._http_error(response)
                return await self._read_stream(response, callbacks, len(body))
        except httpx.ConnectError as exc:
            raise ModelUnreachable(
                f"Could not reach the model server at {self.base_url} ({exc}). Start one there"
                " (for Ollama: `ollama serve`), or point tether at another with TETHER_BASE_URL"
                f" and TETHER_MODEL (and TETHER_API_KEY), or `base_url` in {self._config_hint}.",
                retryable=True,
            ) from exc
        except httpx.TimeoutException as exc:
            raise ModelProtocolError(
                f"The model server at {self.base_url} stopped responding ({type(exc).__name__}).",
                retryable=True,
            ) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise ModelProtocolError(
                f"The stream from {self.base_url} broke off: {exc}", retryable=True
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"The request to {self.base_url} failed: {exc}") from exc

    def _http_error(self, response: httpx.Response) -> ModelHTTPError:
        status = response.status_code
        detail = _error_detail(response)
        retry_after = _parse_retry_after(response.headers.get("retry-after"))
        if status in (401, 403):
            message = (
                f"The model server at {self.base_url} refused the request (HTTP {status}:"
                f" {detail}). Set TETHER_API_KEY, or `api_key` in {self._config_hint}."
            )
        elif status == 404:
            message = (
                f"The model server at {self.base_url} has no model {self.model!r} or no chat"
                f" endpoint (HTTP 404: {detail}). Set TETHER_MODEL to a model it serves, or"
                " check that TETHER_BASE_URL ends in /v1."
            )
        elif status in RETRYABLE_STATUS:
            message = f"The model server at {self.base_url} is busy (HTTP {status}: {detail})."
        else:
            message = f"The model server at {self.base_url} answered HTTP {status}: {detail}"
        return ModelHTTPError(
            message,
            status=status,
            retryable=status in RETRYABLE_STATUS,
            retry_after=retry_after,
        )

    async def _read_stream(
        self, response: httpx.Response, callbacks: StreamCallbacks, request_bytes: int
    ) -> ModelResponse:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, _ToolCallBuilder] = {}
        finish_reason: str | None = None
        usage: _Usage | None = None
        done = False
        # Read to the end of the body even after [DONE] (servers end it right there): leaving
        # httpx's nested line iterators early would leave them to the garbage collector.
        lines = cast(AsyncGenerator[str, None], response.aiter_lines())
        async with aclosing(lines):
            async for line in lines:
                if done or not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                # One network read can hold thousands of lines; let the connections' writers
                # run between them so that a burst does not pile up in every client's queue.
                await trio.lowlevel.checkpoint()
                try:
                    chunk = _chunk_decoder.decode(data)
                except msgspec.DecodeError as exc:
                    raise ModelProtocolError(
                        f"The model server sent a chunk that is not chat-completions JSON: {exc}"
                    ) from exc
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        text.append(delta.content)
                        callbacks.on_text(delta.content)
                    thought = delta.reasoning_content or delta.reasoning
                    if thought:
                        reasoning.append(thought)
                        callbacks.on_reasoning(thought)
                    for call_delta in delta.tool_calls or ():
                        builder = calls.setdefault(call_delta.index, _ToolCallBuilder())
                        if call_delta.id:
                            builder.id = call_delta.id
                        if call_delta.function is not None:
                            if call_delta.function.name:
                                builder.name += call_delta.function.name
                            if call_delta.function.arguments:
                                builder.arguments.append(call_delta.function.arguments)
        if not done and finish_reason is None:
            raise ModelProtocolError(
                f"The stream from {self.base_url} ended before the model finished.",
                retryable=True,
            )
        full_text = "".join(text)
        tool_calls = [
            ToolCallRequest(id=b.id or f"call_{index}", name=b.name, arguments="".join(b.arguments))
            for index, b in sorted(calls.items())
        ]
        if usage is not None:
            model_usage = ModelUsage(
                input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens
            )
        else:
            out_chars = len(full_text) + sum(len(c.arguments) + len(c.name) for c in tool_calls)
            model_usage = ModelUsage(
                input_tokens=round(request_bytes / CHARS_PER_TOKEN),
                output_tokens=round(out_chars / CHARS_PER_TOKEN),
                estimated=True,
            )
        return ModelResponse(
            text=full_text,
            reasoning="".join(reasoning),
            tool_calls=tool_calls,
            finish_reason=finish_reason or "stop",
            usage=model_usage,
        )


def _error_detail(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(payload, dict):
        error = payload.get("error")  # type: ignore[union-attr]
        if isinstance(error, dict) and isinstance(error.get("message"), str):  # type: ignore[union-attr]
            return str(error["message"])  # type: ignore[index]
        if isinstance(error, str):
            return error
    return response.text[:300]


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import time

    return max(0.0, when.timestamp() - time.time())
