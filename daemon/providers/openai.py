"""OpenAI-compatible chat completions, streamed (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter…).

`base_url` is the API root that `/chat/completions` and `/models` hang off, normally ending in
`/v1` (`http://127.0.0.1:11434/v1` for Ollama).

The request body is assembled from pre-encoded messages, so a long conversation costs one
memory copy per step, not a re-encode. httpx errors are mapped to `ModelError`s at this edge
(see `wire`), with messages that say what to fix.

Servers differ; the client adapts once and remembers, per client:

- `stream_options.include_usage` is sent until a server rejects it (HTTP 400/422 naming it,
  or any 400 to the first request that succeeds without it); from then on the request goes
  without it and usage is estimated from characters (`ModelUsage.estimated`).
- `tool_mode`: `native` sends `tools`; `text` describes them in the system prompt and reads
  `<tool_call>` blocks (see `texttools`); `auto` starts native and switches to text for good
  when the server answers that the model does not support tools, retrying that request once.
"""

import base64
from collections.abc import Sequence
from contextlib import aclosing

import httpx
import msgspec

from tether.daemon.providers import texttools
from tether.daemon.providers.base import (
    ImagePart,
    Message,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelResponse,
    StreamCallbacks,
    ToolCallRequest,
    ToolSet,
    encoded_once,
)
from tether.daemon.providers.errors import (
    RETRYABLE_STATUS,
    Rejected,
    error_detail,
    switches_to_text_tools,
)
from tether.daemon.providers.splice import join_json_arrays, join_json_strings
from tether.daemon.providers.stream import StreamedReply
from tether.daemon.providers.wire import DialectClient


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


class _StreamError(msgspec.Struct):
    message: str = ""
    code: int | str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: _StreamError | None = None
    """OpenRouter and some proxies report a failure mid-stream this way."""


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _WireToolCall(msgspec.Struct):
    id: str
    function: _Function
    type: str = "function"


class _ImageURL(msgspec.Struct):
    url: str


class _TextPart(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class _ImagePart(msgspec.Struct, tag_field="type", tag="image_url"):
    image_url: _ImageURL


_Parts = list[_TextPart | _ImagePart]


class _WireMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str | _Parts | None = None
    tool_calls: list[_WireToolCall] | None = None
    tool_call_id: str | None = None


class _TextWireMessage(msgspec.Struct):
    role: str
    content: msgspec.Raw


DIALECT = "openai"
TEXT_DIALECT = "openai-text"
"""Cache key of a message's text-mode content (an encoded JSON string)."""
NO_IMAGES = "-no-images"
"""Suffix of the cache keys of a message with images encoded for a model that takes none."""


def data_url(image: ImagePart) -> str:
    """The image as a `data:` URL (`data:image/png;base64,…`)."""
    return f"data:{image.mime_type};base64,{base64.b64encode(image.data).decode('ascii')}"


def _content(text: str, images: Sequence[ImagePart], *, send: bool) -> str | _Parts:
    """A user message's content: the text alone, or (with images) a list of parts, the text
    first; a model that takes no images gets a line naming each instead."""
    if not images:
        return text
    if not send:
        lines = [image.placeholder("not sent: this model takes no images") for image in images]
        return "\n".join([text, *lines]) if text else "\n".join(lines)
    parts: _Parts = [_TextPart(text)] if text else []
    parts += [_ImagePart(_ImageURL(data_url(image))) for image in images]
    return parts


def encode_message(message: Message, *, images: bool = True) -> msgspec.Raw:
    """The chat-completions form of a message, encoded once and kept on the message; with
    `images` false, a line of text stands for each image."""
    key = DIALECT if images or not message.images else DIALECT + NO_IMAGES
    return encoded_once(
        message.cache, key, lambda: _encoder.encode(_wire_message(message, images=images))
    )


def _wire_message(message: Message, *, images: bool) -> _WireMessage:
    if message.role == "assistant":
        return _WireMessage(
            role="assistant",
            content=message.content or None,
            tool_calls=[
                _WireToolCall(id=c.id, function=_Function(name=c.name, arguments=c.arguments))
                for c in message.tool_calls
            ]
            or None,
        )
    elif message.role == "tool":
        # A tool message takes text only: its images follow in a user message of their own
        # (`encode_messages`), or, for a model that takes none, a line names each.
        content = (
            message.content if images else _content(message.content, message.images, send=False)
        )
        return _WireMessage(role="tool", content=content, tool_call_id=message.tool_call_id)
    return _WireMessage(
        role=message.role, content=_content(message.content, message.images, send=images)
    )


TOOL_IMAGES = "openai-tool-images"
"""Cache key of the parts that carry a tool result's images (an encoded JSON array)."""


def encode_messages(messages: Sequence[Message], *, images: bool = True) -> list[msgspec.Raw]:
    """The conversation for native tools. A `tool` message takes text only, so the images of
    a step's tool results go in one `user` message right after its last tool message (the
    tool messages answering one assistant message stay together), a text part naming the
    call before each result's images."""
    wire: list[msgspec.Raw] = []
    pending: list[msgspec.Raw] = []
    for message in messages:
        if pending and message.role != "tool":
            wire.append(_user_with_parts(pending))
            pending = []
        wire.append(encode_message(message, images=images))
        if images and message.role == "tool" and message.images:
            pending.append(_tool_image_parts(message))
    if pending:
        wire.append(_user_with_parts(pending))
    return wire


def _tool_image_parts(message: Message) -> msgspec.Raw:

    def encode() -> bytes:
        source = f" ({message.tool_name})" if message.tool_name else ""
        parts: _Parts = [
            _TextPart(f"The images returned by tool call {message.tool_call_id}{source}:")
        ]
        parts += [_ImagePart(_ImageURL(data_url(image))) for image in message.images]
        return _encoder.encode(parts)

    return encoded_once(message.cache, TOOL_IMAGES, encode)


def _user_with_parts(parts: list[msgspec.Raw]) -> msgspec.Raw:
    content = parts[0] if len(parts) == 1 else join_json_arrays(parts)
    return msgspec.Raw(_encoder.encode(_TextWireMessage("user", content)))


def encode_tools(tools: ToolSet) -> msgspec.Raw:
    return tools.encoded(
        DIALECT,
        lambda spec: {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        },
    )


def _text_content(message: Message, *, images: bool = True) -> msgspec.Raw:
    """A message's text in text mode (tool calls and results written out), encoded once;
    with `images` false, a line naming each image follows it."""
    placeholders = not images and bool(message.images)
    key = TEXT_DIALECT + NO_IMAGES if placeholders else TEXT_DIALECT

    def encode() -> bytes:
        text = texttools.render_text(message)
        if placeholders:
            text = _content(text, message.images, send=False)
            assert isinstance(text, str)
        return _encoder.encode(text)

    return encoded_once(message.cache, key, encode)


def encode_text_messages(
    messages: Sequence[Message], tools: ToolSet | None, *, images: bool = True
) -> list[msgspec.Raw]:
    """The conversation for text mode: the tools described after the system prompt, tool
    results as user text, and consecutive user-side messages merged into one, since chat
    templates of models without tools often insist that user and assistant alternate. The
    images of the merged messages follow their text as `image_url` parts."""
    wire: list[msgspec.Raw] = []
    user_parts: list[msgspec.Raw] = []
    user_images: list[ImagePart] = []

    def flush_user() -> None:
        if user_parts:
            content = user_parts[0]
            if len(user_parts) > 1:
                content = join_json_strings(user_parts, "\n\n")
            if user_images:
                content = msgspec.Raw(
                    _encoder.encode(
                        [
                            {"type": "text", "text": content},
                            *(_ImagePart(_ImageURL(data_url(i))) for i in user_images),
                        ]
                    )
                )
            wire.append(msgspec.Raw(_encoder.encode(_TextWireMessage("user", content))))
            user_parts.clear()
            user_images.clear()

    for index, message in enumerate(messages):
        content = _text_content(message, images=images)
        if images:
            user_images.extend(message.images)
        if index == 0 and message.role == "system":
            if tools is not None and tools.specs:
                content = join_json_strings([content, texttools.tools_section(tools)], "\n\n")
            wire.append(msgspec.Raw(_encoder.encode(_TextWireMessage("system", content))))
        elif message.role in ("user", "tool"):
            user_parts.append(content)
        else:
            flush_user()
            wire.append(msgspec.Raw(_encoder.encode(_TextWireMessage(message.role, content))))
    flush_user()
    return wire


class _Body(msgspec.Struct, omit_defaults=True):
    model: str
    messages: list[msgspec.Raw]
    stream: bool
    stream_options: dict[str, bool] | None = None
    tools: msgspec.Raw | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_encoder = msgspec.json.Encoder()


class _ToolCallBuilder:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class OpenAIChatClient(DialectClient):
    provider = "openai"
    models_path = "/models"
    stream_path = "/chat/completions"
    dialect_json = "chat-completions JSON"

    stream_usage: bool | None = None
    """Whether the server takes `stream_options.include_usage`: None until it is known (then
    set on the client)."""

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        """Stream one completion. Cancelling it closes the HTTP stream at once.

        One request, repeated at most once per adaptation in the module docstring (a refused
        `stream_options`, refused tools)."""
        dropped_usage = False
        while True:
            text_mode = self.text_tools
            with_usage = self.stream_usage is not False and not dropped_usage
            body = self._body(request, text_mode=text_mode, with_usage=with_usage)
            try:
                response = await self._post(body, callbacks, text_mode=text_mode)
            except Rejected as rejected:
                status = rejected.response.status_code
                detail = error_detail(rejected.response)
                if switches_to_text_tools(
                    request, text_mode=text_mode, tool_mode=self.tool_mode, detail=detail
                ):
                    self.text_tools = True
                    continue
                refuses_tools = texttools.says_tools_unsupported(detail)
                if with_usage and status in (400, 422) and not refuses_tools:
                    if "stream_options" in detail or "include_usage" in detail:
                        self.stream_usage = False
                        continue
                    if status == 400 and self.stream_usage is None:
                        dropped_usage = True
                        continue
                raise self._http_error(rejected.response) from None
            if self.stream_usage is None:
                self.stream_usage = with_usage
            return response

    def _body(self, request: ModelRequest, *, text_mode: bool, with_usage: bool) -> bytes:
        tools = request.offered_tools()
        if text_mode:
            messages = encode_text_messages(request.messages, tools, images=self.images)
        else:
            messages = encode_messages(request.messages, images=self.images)
        return _encoder.encode(
            _Body(
                model=self.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True} if with_usage else None,
                tools=encode_tools(tools) if tools is not None and not text_mode else None,
            )
        )

    def _stream_fix(self) -> str:
        return (
            f"Check that TETHER_BASE_URL (or `base_url` in {self._config_hint}) is the API root"
            " of an OpenAI-compatible server, usually ending in /v1."
        )

    def _unreachable_hint(self) -> str:
        return (
            "Start one there (for Ollama: `ollama serve`), or point tether at another with"
            " TETHER_BASE_URL and TETHER_MODEL (and TETHER_API_KEY), or `base_url` in"
            f" {self._config_hint}."
        )

    def _http_error(self, response: httpx.Response, what: str = "") -> ModelHTTPError:
        def not_found(detail: str) -> str:
            if what:
                return (
                    f"The model server at {self.base_url} has no {what} (HTTP 404: {detail})."
                    " Check that TETHER_BASE_URL is the API root, usually ending in /v1."
                )
            return (
                f"The model server at {self.base_url} has no model {self.model!r} or no chat"
                f" endpoint (HTTP 404: {detail}). Set TETHER_MODEL to a model it serves, or"
                " check that TETHER_BASE_URL ends in /v1."
            )

        return self._status_error(
            response,
            server=f"The model server at {self.base_url}",
            key_fix=f"Set TETHER_API_KEY, or `api_key` in {self._config_hint}.",
            not_found=not_found,
        )

    async def _read_stream(self, response: httpx.Response, reply: StreamedReply) -> None:
        calls: dict[int, _ToolCallBuilder] = {}
        async with aclosing(reply.data(response)) as events:
            async for data in events:
                if data == "[DONE]":
                    reply.stopped = True
                    continue
                chunk = reply.decode(_chunk_decoder, data)
                if chunk is None:
                    continue
                if chunk.error is not None:
                    reply.failure = _stream_error(self.base_url, chunk.error)
                    continue
                if chunk.usage is not None:
                    reply.input_tokens = chunk.usage.prompt_tokens
                    reply.output_tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        reply.add_text(delta.content)
                    thought = delta.reasoning_content or delta.reasoning
                    if thought:
                        reply.add_thought(thought)
                    for call_delta in delta.tool_calls or ():
                        builder = calls.setdefault(call_delta.index, _ToolCallBuilder())
                        if call_delta.id:
                            builder.id = call_delta.id
                        if call_delta.function is not None:
                            if call_delta.function.name:
                                builder.name += call_delta.function.name
                            if call_delta.function.arguments:
                                builder.arguments.append(call_delta.function.arguments)
        reply.tool_calls = [
            ToolCallRequest(id=b.id or f"call_{index}", name=b.name, arguments="".join(b.arguments))
            for index, b in sorted(calls.items())
        ]


def _stream_error(base_url: str, error: _StreamError) -> ModelError:
    code = error.code
    status = code if isinstance(code, int) else None
    retryable = status is None or status in RETRYABLE_STATUS
    message = f"The model server at {base_url} reported an error mid-stream: {error.message}"
    if status is not None:
        return ModelHTTPError(message, status=status, retryable=retryable)
    return ModelProtocolError(message, retryable=retryable)
