"""The seam between the turn loop and a model provider.

Errors (one hierarchy, mapped from httpx at the provider's edge):

    ModelError                 the call failed; `message` says what to fix
    ├── ModelUnreachable       nothing answered at the base URL (connection refused, DNS, TLS)
    ├── ModelHTTPError         the server answered with an HTTP error status
    └── ModelProtocolError     the server answered, but not in the expected format, or the
        │                      stream ended early
        └── ModelTimeout       the server sent nothing for the silence timeout

`retryable` marks the failures worth retrying (busy server, dropped stream); `retry_after`
carries the server's own hint in seconds when it gave one. A `ModelTimeout` is retryable, but
has already cost a whole silence timeout, so the loop tries it once more only; a
`ModelUnreachable` is retryable too, and the loop tries it once more only, 0.25 s later.
"""

from collections.abc import Callable
from typing import ClassVar, Literal, Protocol

import msgspec

from tether.protocol.enums import ModelErrorCode


class ToolCallRequest(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str


class ModelUsage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRequest] = []
    finish_reason: str = "stop"
    usage: ModelUsage = ModelUsage()
    warnings: list[str] = []
    """What went wrong without spoiling the reply (a skipped undecodable line), for a notice."""


Role = Literal["system", "user", "assistant", "tool"]


class ImagePart(msgspec.Struct, frozen=True, kw_only=True):
    """An image in a user message, ready for the model: within every dialect's limits
    (`tether.daemon.context.images` made it so)."""

    name: str
    mime_type: str
    data: bytes
    width: int
    height: int

    def placeholder(self, why: str = "") -> str:
        """The text that stands for the image where it cannot be sent (`why`: the reason)."""
        return f"[image {self.name} {self.width}x{self.height}{f': {why}' if why else ''}]"


class Message(msgspec.Struct, kw_only=True):
    """One message of the conversation, in no provider's format.

    `cache` holds each provider dialect's encoding of this message, made the first time the
    message is sent: the conversation only grows, so every step re-encodes only what is new.
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCallRequest] = []
    tool_call_id: str = ""
    tool_name: str = ""
    """For tool results: the tool that produced it (some dialects want it)."""
    images: list[ImagePart] = []
    """For user messages: the images sent with the text, in order."""
    cache: dict[str, msgspec.Raw] = {}
    chars: int = -1
    """What `budget.message_chars` counted (-1: not yet). Whoever changes the content resets
    it, together with `cache`."""


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    parameters: msgspec.Raw
    """JSON Schema of the arguments."""


class ToolSet(msgspec.Struct, kw_only=True):
    """The tools offered to the model; `cache` holds each dialect's encoding of the list,
    which is part of the stable prompt prefix."""

    specs: list[ToolSpec]
    cache: dict[str, msgspec.Raw] = {}
    chars: int = -1
    """What `budget.message_chars` counted (-1: not yet). Whoever changes the content resets
    it, together with `cache`."""

    def encoded(self, dialect: str, definition: Callable[[ToolSpec], object]) -> msgspec.Raw:
        """The list in `dialect`'s wire form (each spec as `definition` writes it), encoded
        once and kept in `cache`."""
        return encoded_once(
            self.cache,
            dialect,
            lambda: _encoder.encode([definition(spec) for spec in self.specs]),
        )


_encoder = msgspec.json.Encoder()


def encoded_once(
    cache: dict[str, msgspec.Raw], key: str, encode: Callable[[], bytes]
) -> msgspec.Raw:
    """`cache[key]` (a `Message.cache` or `ToolSet.cache`), made with `encode` the first time
    it is asked for."""
    cached = cache.get(key)
    if cached is None:
        cached = cache[key] = msgspec.Raw(encode())
    return cached


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[Message]
    """The first message is the system prompt."""
    tools: ToolSet | None = None

    def offered_tools(self) -> ToolSet | None:
        """The tools the model is offered: None when there are none (no set, or an empty one),
        which a dialect then leaves out of the request."""
        return self.tools if self.tools is not None and self.tools.specs else None


class ModelError(Exception):
    code: ClassVar[ModelErrorCode] = "model_error"
    """What clients are told failed (`TurnError.code`); each subclass names its own."""

    def __init__(
        self, message: str, *, retryable: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


class ModelUnreachable(ModelError):
    code = "model_unreachable"


class ModelHTTPError(ModelError):
    code = "model_http_error"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable, retry_after=retry_after)
        self.status = status


class ModelProtocolError(ModelError):
    code = "model_protocol_error"


class ModelTimeout(ModelProtocolError):
    code = "model_timeout"


class StreamCallbacks(Protocol):
    def on_text(self, delta: str) -> None: ...
    def on_reasoning(self, delta: str) -> None: ...


class QuietCallbacks:
    """Stream callbacks that ignore what streams, for a call whose response alone matters."""

    def on_text(self, delta: str) -> None:
        pass

    def on_reasoning(self, delta: str) -> None:
        pass


class ModelClient(Protocol):
    """Makes one streamed model call.

    `complete` reports text as it streams through `callbacks` and returns the assembled
    response. Cancelling it closes the HTTP stream at once.
    """

    model: str
    provider: str
    """`openai` or `anthropic`: the wire dialect it speaks."""

    async def complete(
        self, request: ModelRequest, callbacks: StreamCallbacks
    ) -> ModelResponse: ...

    async def list_models(self) -> list[str]:
        """The model ids the server offers (a short timeout; raises ModelError)."""
        ...

    async def aclose(self) -> None: ...
