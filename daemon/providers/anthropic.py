"""Anthropic Messages, streamed (api.anthropic.com and servers that speak the same API).

`base_url` is the server root: `https://api.anthropic.com`; a trailing `/v1` is accepted and
dropped, so `http://host:port` and `http://host:port/v1` mean the same. Requests go to
`{root}/v1/messages`, the model list comes from `{root}/v1/models`.

Encoding. The first message (role `system`) becomes `system`. Every other message becomes a
list of content blocks, encoded once and kept in `Message.cache["anthropic"]`:

    user, later system   [image…, text]              (no block for empty text); images as
                                                     base64 `image` blocks, before the text
    assistant            [text?, tool_use…]          input = the parsed arguments; arguments
                                                     that are not a JSON object go as {} with
                                                     a text block quoting them
    tool                 [tool_result]               sent in a user message; a tool's images
                                                     go in its `content`, after the text

Consecutive messages of the same wire role are merged into one message (the API wants user and
assistant to alternate, with every tool result in the user message right after its call), and
empty messages are left out. Prompt caching: the system prompt and the last block of the
conversation carry `cache_control`, so each step reads the previous step's prefix from cache.

Stream. `message_start` (input usage), `content_block_start` / `_delta` / `_stop` for text,
thinking and tool_use blocks (tool input arrives as `input_json_delta` fragments),
`message_delta` (stop reason, output usage), `message_stop`, `ping`, `error`. Stop reasons map
to the OpenAI words the loop uses: end_turn → stop, tool_use → tool_calls, max_tokens → length.

`tool_mode` works as for the OpenAI client (see `texttools`), with `anthropic-text` as the
cache key of text-mode encodings.
"""

import re
from collections.abc import Sequence
from contextlib import aclosing
from typing import Unpack

import httpx
import msgspec

from tether.daemon.providers import texttools
from tether.daemon.providers.base import (
    Message,
    ModelError,
    ModelHTTPError,
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
from tether.daemon.providers.wire import DialectClient, DialectOptions

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DIALECT = "anthropic"
TEXT_DIALECT = "anthropic-text"
SYSTEM_KEY = "anthropic-system"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The HTTP status Anthropic documents for each error type, for errors sent mid-stream."""


# --- request encoding ------------------------------------------------------------------------


class _Ephemeral(msgspec.Struct):
    type: str = "ephemeral"


_CACHE_CONTROL = msgspec.json.encode({"cache_control": _Ephemeral()})[1:-1]


class _TextBlock(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class _ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: msgspec.Raw


class _ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", omit_defaults=True):
    tool_use_id: str
    content: "str | list[_TextBlock | _ImageBlock]" = ""


class _ImageSource(msgspec.Struct, tag_field="type", tag="base64"):
    media_type: str
    data: bytes
    """base64 in JSON, as msgspec encodes bytes."""


class _ImageBlock(msgspec.Struct, tag_field="type", tag="image"):
    source: _ImageSource


class _SystemBlock(msgspec.Struct, tag_field="type", tag="text"):
    text: msgspec.Raw
    cache_control: _Ephemeral


class _WireMessage(msgspec.Struct):
    role: str
    content: msgspec.Raw


class _ToolDefinition(msgspec.Struct):
    name: str
    description: str
    input_schema: msgspec.Raw


class _Body(msgspec.Struct, omit_defaults=True):
    model: str
    max_tokens: int
    stream: bool
    messages: list[msgspec.Raw]
    system: msgspec.Raw | None = None
    tools: msgspec.Raw | None = None


_encoder = msgspec.json.Encoder()
_EMPTY_INPUT = msgspec.Raw(b"{}")
_BAD_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def tool_use_id(call_id: str) -> str:
    """A call id in the characters the API accepts (ids from other servers may have others)."""
    return _BAD_ID_CHARS.sub("_", call_id) or "call"


def _tool_input(arguments: str) -> msgspec.Raw | None:
    """The arguments as a JSON object for `input`, or None when they are not one."""
    stripped = arguments.strip()
    if not stripped:
        return _EMPTY_INPUT
    try:
        value: object = msgspec.json.decode(stripped)
    except msgspec.DecodeError:
        return None
    return msgspec.Raw(stripped.encode()) if isinstance(value, dict) else None


NO_IMAGES = "-no-images"
"""Suffix of the cache keys of a message with images encoded for a model that takes none."""
_OutBlock = _TextBlock | _ImageBlock | _ToolUseBlock | _ToolResultBlock


def _image_blocks(message: Message, *, send: bool) -> list[_TextBlock | _ImageBlock]:
    """The images of a user message, before its text as Anthropic advises; for a model that
    takes no images, a text block naming each."""
    if not send:
        return [
            _TextBlock(image.placeholder("not sent: this model takes no images"))
            for image in message.images
        ]
    return [
        _ImageBlock(_ImageSource(media_type=image.mime_type, data=image.data))
        for image in message.images
    ]


def _tool_result(message: Message, *, send: bool) -> _ToolResultBlock:
    """A tool's result; its images (a tool's own, see `ToolCall.images`) in its `content`
    after the text, or a line naming each for a model that takes no images."""
    use_id = tool_use_id(message.tool_call_id)
    if not message.images:
        return _ToolResultBlock(tool_use_id=use_id, content=message.content)
    content: list[_TextBlock | _ImageBlock] = []
    if message.content.strip():
        content.append(_TextBlock(message.content))
    content += _image_blocks(message, send=send)
    return _ToolResultBlock(tool_use_id=use_id, content=content)


def _key(base: str, message: Message, images: bool) -> str:
    return base if images or not message.images else base + NO_IMAGES


def encode_blocks(message: Message, *, images: bool = True) -> msgspec.Raw:
    """The content blocks of a (non-system-prompt) message, encoded once and kept on it;
    with `images` false, a text block stands for each image."""
    return encoded_once(
        message.cache,
        _key(DIALECT, message, images),
        lambda: _encoder.encode(_blocks(message, images=images)),
    )


def _blocks(message: Message, *, images: bool) -> list[_OutBlock]:
    if message.role == "tool":
        blocks: list[_OutBlock] = [_tool_result(message, send=images)]
    else:
        blocks = [*_image_blocks(message, send=images)]
        if message.content.strip():
            blocks.append(_TextBlock(message.content))
        for call in message.tool_calls:
            value = _tool_input(call.arguments)
            if value is None:
                blocks.append(
                    _TextBlock(
                        f"[the arguments of call {call.id} were not a JSON object: "
                        f"{call.arguments}]"
                    )
                )
            blocks.append(
                _ToolUseBlock(id=tool_use_id(call.id), name=call.name, input=value or _EMPTY_INPUT)
            )
    return blocks


def encode_text_blocks(message: Message, *, images: bool = True) -> msgspec.Raw:
    """Text mode: the images, then one text block with the calls or the result written out."""

    def encode() -> bytes:
        text = texttools.render_text(message)
        blocks: list[_OutBlock] = [*_image_blocks(message, send=images)]
        if text.strip():
            blocks.append(_TextBlock(text))
        return _encoder.encode(blocks)

    return encoded_once(message.cache, _key(TEXT_DIALECT, message, images), encode)


def encode_system(
    message: Message, tools: ToolSet | None, *, text_mode: bool
) -> msgspec.Raw | None:
    """`system`: one text block marked for caching (None when there is nothing to say)."""
    parts: list[msgspec.Raw] = []
    if message.content:
        parts.append(
            encoded_once(message.cache, SYSTEM_KEY, lambda: _encoder.encode(message.content))
        )
    if text_mode and tools is not None and tools.specs:
        parts.append(texttools.tools_section(tools))
    if not parts:
        return None
    text = parts[0] if len(parts) == 1 else join_json_strings(parts, "\n\n")
    return msgspec.Raw(_encoder.encode([_SystemBlock(text=text, cache_control=_Ephemeral())]))


def encode_tools(tools: ToolSet) -> msgspec.Raw:
    return tools.encoded(
        DIALECT,
        lambda spec: _ToolDefinition(
            name=spec.name, description=spec.description, input_schema=spec.parameters
        ),
    )


def encode_messages(
    messages: Sequence[Message], *, text_mode: bool, images: bool = True
) -> list[msgspec.Raw]:
    """The alternating user/assistant messages (everything after the system prompt)."""
    encode = encode_text_blocks if text_mode else encode_blocks
    merged: list[tuple[str, list[msgspec.Raw]]] = []
    for index, message in enumerate(messages):
        if index == 0 and message.role == "system":
            continue
        blocks = encode(message, images=images)
        if len(blocks) <= 2:  # []: nothing to say
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if merged and merged[-1][0] == role:
            merged[-1][1].append(blocks)
        else:
            merged.append((role, [blocks]))
    wire: list[msgspec.Raw] = []
    for position, (role, parts) in enumerate(merged):
        content = parts[0] if len(parts) == 1 else join_json_arrays(parts)
        if position == len(merged) - 1 and role == "user":
            content = _with_cache_breakpoint(content)
        wire.append(msgspec.Raw(_encoder.encode(_WireMessage(role, content))))
    return wire


def _with_cache_breakpoint(blocks: msgspec.Raw) -> msgspec.Raw:
    """`blocks` with `cache_control` added to its last block (`[…, {…}]` → `[…, {…, cc}]`)."""
    data = bytes(blocks)
    return msgspec.Raw(data[:-2] + b"," + _CACHE_CONTROL + b"}]")


# --- stream decoding -------------------------------------------------------------------------


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    def prompt_tokens(self) -> int | None:
        if self.input_tokens is None:
            return None
        return (
            self.input_tokens
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )


class _StartMessage(msgspec.Struct):
    usage: _Usage | None = None


class _ContentBlock(msgspec.Struct):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""
    thinking: str = ""
    input: msgspec.Raw = msgspec.Raw(b"")
    """Empty when absent (msgspec cannot decode `Raw | None`)."""


class _Delta(msgspec.Struct):
    type: str = ""
    text: str = ""
    thinking: str = ""
    partial_json: str = ""
    stop_reason: str | None = None


class _ErrorBody(msgspec.Struct):
    type: str = "api_error"
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    index: int = 0
    message: _StartMessage | None = None
    content_block: _ContentBlock | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _ErrorBody | None = None


_event_decoder = msgspec.json.Decoder(_Event)


class _Block:
    __slots__ = ("id", "kind", "name", "parts", "start_input")

    def __init__(self, kind: str, id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.start_input = b""


def api_root(base_url: str) -> str:
    """The server root for a configured base URL (a trailing `/v1` is dropped)."""
    return base_url.rstrip("/").removesuffix("/v1")


class AnthropicMessagesClient(DialectClient):
    provider = "anthropic"
    models_path = "/v1/models"
    models_params = {"limit": 1000}
    stream_path = "/v1/messages"
    dialect_json = "Messages JSON"

    def __init__(
        self,
        *,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        max_output_tokens: int = 8192,
        **options: Unpack[DialectOptions],
    ) -> None:
        super().__init__(base_url=base_url, model=model, **options)
        self.max_output_tokens = max_output_tokens

    _api_root = staticmethod(api_root)

    @staticmethod
    def _headers(api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        """Stream one reply. Cancelling it closes the HTTP stream at once.

        In `auto` tool mode a refusal of the tools switches to text mode and repeats the
        request once; otherwise it makes exactly one request."""
        while True:
            text_mode = self.text_tools
            body = self._body(request, text_mode=text_mode)
            try:
                return await self._post(body, callbacks, text_mode=text_mode)
            except Rejected as rejected:
                if switches_to_text_tools(
                    request,
                    text_mode=text_mode,
                    tool_mode=self.tool_mode,
                    detail=error_detail(rejected.response),
                ):
                    self.text_tools = True
                    continue
                raise self._http_error(rejected.response) from None

    def _body(self, request: ModelRequest, *, text_mode: bool) -> bytes:
        tools = request.offered_tools()
        messages = request.messages
        system = None
        if messages and messages[0].role == "system":
            system = encode_system(messages[0], tools, text_mode=text_mode)
        return _encoder.encode(
            _Body(
                model=self.model,
                max_tokens=self.max_output_tokens,
                stream=True,
                system=system,
                tools=encode_tools(tools) if tools is not None and not text_mode else None,
                messages=encode_messages(messages, text_mode=text_mode, images=self.images),
            )
        )

    def _stream_fix(self) -> str:
        return (
            f"Check that TETHER_BASE_URL (or `base_url` in {self._config_hint}) is the root of"
            " a server that speaks the Anthropic Messages API (https://api.anthropic.com)."
        )

    def _unreachable_hint(self) -> str:
        return (
            "Check TETHER_BASE_URL (or `base_url` in"
            f" {self._config_hint}): for Anthropic it is https://api.anthropic.com."
        )

    def _http_error(self, response: httpx.Response, what: str = "") -> ModelHTTPError:
        def not_found(detail: str) -> str:
            return (
                f"The server at {self.base_url} has no {what or f'model {self.model!r}'}"
                f" (HTTP 404: {detail}). Set TETHER_MODEL to a model it serves, and"
                " TETHER_BASE_URL to the API root (https://api.anthropic.com)."
            )

        return self._status_error(
            response,
            server=f"The Anthropic API at {self.base_url}",
            key_fix=f"Set ANTHROPIC_API_KEY (or TETHER_API_KEY), or `api_key` in"
            f" {self._config_hint}, to a key that may use {self.model!r}.",
            not_found=not_found,
        )

    async def _read_stream(self, response: httpx.Response, reply: StreamedReply) -> None:
        blocks: dict[int, _Block] = {}
        async with aclosing(reply.data(response)) as events:
            async for data in events:
                event = reply.decode(_event_decoder, data)
                if event is None:
                    continue
                kind = event.type
                if kind == "content_block_delta" and event.delta is not None:
                    delta = event.delta
                    block = blocks.get(event.index)
                    if delta.type == "text_delta" and delta.text:
                        reply.add_text(delta.text)
                    elif delta.type == "thinking_delta" and delta.thinking:
                        reply.add_thought(delta.thinking)
                    elif delta.type == "input_json_delta" and block is not None:
                        block.parts.append(delta.partial_json)
                elif kind == "content_block_start" and event.content_block is not None:
                    start = event.content_block
                    block = blocks[event.index] = _Block(start.type, start.id, start.name)
                    if start.type == "tool_use":
                        block.start_input = bytes(start.input)
                    elif start.type == "text" and start.text:
                        reply.add_text(start.text)
                    elif start.type == "thinking" and start.thinking:
                        reply.add_thought(start.thinking)
                elif kind == "message_start" and event.message is not None:
                    started = event.message.usage
                    if started is not None:
                        reply.input_tokens = started.prompt_tokens()
                        reply.output_tokens = started.output_tokens
                elif kind == "message_delta":
                    if event.delta is not None and event.delta.stop_reason:
                        stop = event.delta.stop_reason
                        reply.finish_reason = STOP_REASONS.get(stop, stop)
                    if event.usage is not None:
                        if event.usage.output_tokens is not None:
                            reply.output_tokens = event.usage.output_tokens
                        if event.usage.prompt_tokens() is not None:
                            reply.input_tokens = event.usage.prompt_tokens()
                elif kind == "message_stop":
                    reply.stopped = True
                elif kind == "error":
                    reply.failure = _stream_error(self.base_url, event.error or _ErrorBody())
        reply.tool_calls = [
            ToolCallRequest(
                id=block.id or f"toolu_{index}",
                name=block.name,
                arguments="".join(block.parts) or block.start_input.decode() or "{}",
            )
            for index, block in sorted(blocks.items())
            if block.kind == "tool_use"
        ]


def _stream_error(base_url: str, error: _ErrorBody) -> ModelError:
    status = ERROR_STATUS.get(error.type, 500)
    return ModelHTTPError(
        f"The Anthropic API at {base_url} reported {error.type} mid-stream: {error.message}",
        status=status,
        retryable=status in RETRYABLE_STATUS,
    )
