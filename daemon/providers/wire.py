"""What the HTTP dialects share: their clients' base class (`DialectClient`), mapping httpx
failures and error statuses to `ModelError`s at the edge, reading `data:` lines of a
server-sent-event stream, and splicing pre-encoded JSON.

Which failures are retryable (the loop retries those; see `ModelError.retryable`):

    HTTP 408 425 429 500 502 503 504 (and 529, Anthropic's "overloaded")   yes, with Retry-After
    connection refused / DNS / TLS (ModelUnreachable)                      yes, but the loop
                                                                            tries once more only
    a stream that broke off, or ended cleanly before the model finished    yes
    a server silent for the silence timeout (ModelTimeout)                 yes, but the loop
                                                                            tries once more only
    HTTP 401 403 404 and other 4xx                                          no: the message says
                                                                            what to fix
    a 200 answer that is not an event stream (an HTML page, JSON)          no: a retry gets the
    a stream of lines that are not the dialect's JSON                      same answer

One undecodable `data:` line in a stream that otherwise finishes is skipped, and the reply
carries a warning saying so (`ModelResponse.warnings`): the rest of the reply is intact, and
failing would throw it away for a fault that repeating the request is unlikely to mend. A
stream that does not finish, or in which nothing could be read, fails instead.
"""

import copy
import re
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from contextlib import aclosing, contextmanager
from typing import ClassVar, Self, TypedDict, TypeVar, cast

import httpx
import msgspec
import trio

from tether.daemon.logs.log import DEBUG, add_secret, clip_bytes, get_logger
from tether.daemon.providers.base import (
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelResponse,
    ModelTimeout,
    ModelUnreachable,
    ModelUsage,
    StreamCallbacks,
    ToolCallRequest,
)
from tether.daemon.providers.texttools import TextToolCalls, ToolMode, says_tools_unsupported

log = get_logger(__name__)

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504, 529})
EVENT_STREAM = "text/event-stream"
EXCERPT_CHARS = 120
"""How much of a body or line an error message quotes."""
CHARS_PER_TOKEN = 3.5
"""Token estimate for servers that report no usage."""

_T = TypeVar("_T")


def estimate_tokens(chars: int) -> int:
    return round(chars / CHARS_PER_TOKEN)


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """The server's wait hint in seconds: `retry-after-ms`, or `Retry-After` as seconds or as
    an HTTP date; None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime  # only for a dated Retry-After, rarely

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_detail(response: httpx.Response) -> str:
    """The server's own words from an error body (`{"error": {"message"}}`, `{"error": "…"}`,
    Anthropic's `{"type": "error", "error": {…}}`), else the start of the body."""
    try:
        payload: object = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(payload, dict):
        error = cast(dict[str, object], payload).get("error")
        if isinstance(error, dict):
            message = cast(dict[str, object], error).get("message")
            if isinstance(message, str):
                return message
        if isinstance(error, str):
            return error
        detail = cast(dict[str, object], payload).get("detail")  # FastAPI-style servers
        if isinstance(detail, str):
            return detail
    return response.text[:300]


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` quoted, with control characters escaped, cut after `limit` characters."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


@contextmanager
def transport_errors(
    base_url: str, unreachable_hint: str, *, silence_timeout: float | None = None
) -> Generator[None]:
    """Map httpx failures raised inside the block to `ModelError`s (ModelErrors pass through).
    `silence_timeout` is the read timeout in force, named in the message when it runs out."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ModelUnreachable(
            f"Could not reach the model server at {base_url} ({exc or type(exc).__name__}). "
            + unreachable_hint,
            retryable=True,
        ) from exc
    except httpx.TimeoutException as exc:
        silent = f" for {silence_timeout:g} s" if silence_timeout is not None else ""
        raise ModelTimeout(
            f"The model server at {base_url} stopped responding: nothing arrived{silent}"
            f" ({type(exc).__name__}).",
            retryable=True,
        ) from exc
    except (httpx.RemoteProtocolError, httpx.NetworkError) as exc:
        raise ModelProtocolError(
            f"The stream from {base_url} broke off: {exc or type(exc).__name__}", retryable=True
        ) from exc
    except httpx.UnsupportedProtocol as exc:
        raise ModelError(
            f"The model server URL {base_url!r} is not an http(s) URL ({exc}). Fix TETHER_BASE_URL"
            " or `base_url` in the config."
        ) from exc
    except httpx.HTTPError as exc:
        raise ModelError(f"The request to {base_url} failed: {exc}") from exc


async def accept_stream(response: httpx.Response, *, base_url: str, fix: str) -> None:
    """Return when `response` is a stream of events to read. Raise `Rejected` for an HTTP
    error status, and a final `ModelProtocolError` when a 2xx answer is not an event stream (a
    missing content type is given the benefit of the doubt), its message quoting the start of
    the body and ending with `fix`. Either way the body is read first, so the connection can
    be reused."""
    if response.status_code >= 400:
        await response.aread()
        raise Rejected(response)
    content_type = response.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if not media or media == EVENT_STREAM:
        return
    await response.aread()
    shown = error_detail(response) if media.endswith("json") else response.text
    raise ModelProtocolError(
        f"The server at {base_url} answered HTTP {response.status_code} with {content_type}, not"
        f" an event stream: {excerpt(shown) if shown else 'an empty body'}. {fix}"
    )


class Received:
    """What a stream has delivered, for messages about a stream that went wrong."""

    __slots__ = ("data_lines", "head")

    def __init__(self) -> None:
        self.head = ""
        """The first `EXCERPT_CHARS` characters of the body (more, by one read)."""
        self.data_lines = 0

    def describe(self) -> str:
        if not self.head:
            return "the body was empty"
        return f"{self.data_lines} data lines arrived, starting {excerpt(self.head)}"


_LINE_END = re.compile(r"\r\n|\r|\n")


async def sse_data(
    response: httpx.Response, received: Received | None = None
) -> AsyncGenerator[str]:
    """The payload of every complete, non-empty `data:` line of an event stream; `received`
    keeps count.

    Lines end at CR, LF or CRLF only (JSON may hold a raw U+2028, which `aiter_lines` would
    split on); an unfinished last line is dropped. Callers read to the end of the body, even
    after a final event or an error: leaving httpx's nested byte iterators early would leave
    them to the garbage collector.
    """
    received = received or Received()
    pending = ""
    chunks = cast(AsyncGenerator[str, None], response.aiter_text())
    async with aclosing(chunks):
        async for chunk in chunks:
            if len(received.head) < EXCERPT_CHARS:
                received.head += chunk
            pending += chunk
            if "\n" not in chunk and "\r" not in chunk:
                continue
            *lines, pending = _LINE_END.split(pending)
            for line in lines:
                if line.startswith("data:"):
                    data = line[5:].strip()
                    if not data:
                        continue
                    received.data_lines += 1
                    # One network read can hold thousands of lines; let the connections'
                    # writers run between them so that a burst does not pile up in every
                    # client's queue.
                    await trio.lowlevel.checkpoint()
                    yield data


def join_json_strings(parts: Iterable[msgspec.Raw], separator: str) -> msgspec.Raw:
    """One JSON string from several encoded JSON strings, joined by `separator`.

    JSON string escapes are local, so stripping the quotes and concatenating is exact: this
    merges cached encodings with a memory copy instead of decoding and re-encoding them.
    """
    inner = [memoryview(part)[1:-1] for part in parts]
    sep = msgspec.json.encode(separator)[1:-1]
    return msgspec.Raw(b'"' + sep.join(inner) + b'"')


def join_json_arrays(parts: Iterable[msgspec.Raw]) -> msgspec.Raw:
    """One JSON array from several encoded JSON arrays (empty ones drop out)."""
    inner = [memoryview(part)[1:-1] for part in parts if len(memoryview(part)) > 2]
    return msgspec.Raw(b"[" + b",".join(inner) + b"]")


class Rejected(Exception):
    """The server answered a request with an HTTP error (the body is read)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class StreamFaults:
    """Undecodable `data:` lines of one stream, and the decision the module docstring draws:
    skipped with a warning when the stream finished and some line was read, else fatal."""

    __slots__ = ("decoded", "first", "first_error", "skipped")

    def __init__(self) -> None:
        self.skipped = 0
        self.decoded = 0
        self.first = ""
        self.first_error = ""

    def bad_line(self, data: str, error: Exception) -> None:
        if not self.skipped:
            self.first, self.first_error = data, str(error)
        self.skipped += 1

    def check(
        self, *, finished: bool, base_url: str, dialect_json: str, received: Received
    ) -> list[str]:
        """Raise when the stream cannot be used; otherwise the warnings for the reply."""
        bad = (
            f"{self.skipped} line{'s' if self.skipped != 1 else ''} that"
            f" {'is' if self.skipped == 1 else 'are'} not {dialect_json}"
            f" (first: {excerpt(self.first)}"
        )
        if self.skipped and (not finished or not self.decoded):
            raise ModelProtocolError(
                f"The server at {base_url} sent {bad}: {self.first_error}). Check that the base"
                " URL and the provider kind match the server."
            )
        if not finished:
            if received.data_lines == 0 and received.head.strip():
                raise ModelProtocolError(
                    f"The server at {base_url} answered with something that is not an event"
                    f" stream: {excerpt(received.head)}. Check that the base URL is the model"
                    " API."
                )
            raise ModelProtocolError(
                f"The stream from {base_url} ended before the model finished"
                f" ({received.describe()}).",
                retryable=True,
            )
        if not self.skipped:
            return []
        return [f"Skipped {bad}) in the stream from {base_url}; the reply may lack a piece."]


def http_client(
    headers: Mapping[str, str],
    *,
    base_url: str,
    silence_timeout: float,
    transport: httpx.AsyncBaseTransport | None,
) -> httpx.AsyncClient:
    """The client a dialect talks through: `silence_timeout` bounds the wait for each read of a
    stream; proxies from the environment are not used (the servers are configured directly).

    Only an `https` base URL gets the CA bundle: loading it costs more than the rest of the
    client, and a plain-HTTP server (a local model) never needs it. Any other URL gets a TLS
    context that verifies as strictly but trusts no certificate at all, so TLS to anything
    else fails rather than go unverified (redirects are not followed)."""
    verify: ssl.SSLContext | bool = True
    if not base_url.lower().startswith("https:"):
        verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return httpx.AsyncClient(
        headers=dict(headers),
        timeout=httpx.Timeout(connect=10.0, read=silence_timeout, write=30.0, pool=10.0),
        transport=transport,
        trust_env=False,
        verify=verify,
    )


class _ModelEntry(msgspec.Struct):
    id: str


class _ModelList(msgspec.Struct):
    data: list[_ModelEntry] = []


_models_decoder = msgspec.json.Decoder(_ModelList)


async def fetch_model_ids(
    http: httpx.AsyncClient,
    url: str,
    *,
    base_url: str,
    unreachable_hint: str,
    http_error: Callable[[httpx.Response], ModelError],
    params: Mapping[str, int] | None = None,
) -> list[str]:
    """GET a `{"data": [{"id": ...}]}` model list with a short timeout; sorted ids."""
    with transport_errors(base_url, unreachable_hint):
        response = await http.get(url, params=params, timeout=5.0)
    if response.status_code >= 400:
        raise http_error(response)
    try:
        listing = _models_decoder.decode(response.content)
    except msgspec.DecodeError as exc:
        raise ModelProtocolError(f"{url} answered with no model list: {exc}") from exc
    return sorted(entry.id for entry in listing.data)


def status_error(
    response: httpx.Response,
    *,
    server: str,
    key_fix: str,
    not_found: Callable[[str], str],
    model: str,
    base_url: str,
    config_hint: str,
) -> ModelHTTPError:
    """The error for an HTTP error status, in the dialect's words: `server` names who answered
    ("The model server at …"), `key_fix` says what to set when it refuses the key, and
    `not_found` words a 404 from the server's detail. Retryable when the server is busy (never
    when it refuses tools, which a retry cannot change), with the server's Retry-After."""
    status = response.status_code
    detail = error_detail(response)
    refuses_tools = says_tools_unsupported(detail)
    if status in (401, 403):
        message = f"{server} refused the request (HTTP {status}: {detail}). {key_fix}"
    elif status == 404:
        message = not_found(detail)
    elif refuses_tools:
        message = (
            f"The model {model!r} at {base_url} does not take tool definitions"
            f' (HTTP {status}: {detail}). Set `tool_mode = "text"` (or "auto") under'
            f" [provider] in {config_hint}, or use a model with tool support."
        )
    elif status in RETRYABLE_STATUS:
        message = f"{server} is busy (HTTP {status}: {detail})."
    else:
        message = f"{server} answered HTTP {status}: {detail}"
    return ModelHTTPError(
        message,
        status=status,
        retryable=status in RETRYABLE_STATUS and not refuses_tools,
        retry_after=parse_retry_after(response.headers),
    )


def switches_to_text_tools(
    request: ModelRequest, *, text_mode: bool, tool_mode: ToolMode, detail: str
) -> bool:
    """Whether a refused request is to be repeated with the tools described in text: in `auto`
    tool mode, when native tools were sent and the server says the model takes none."""
    has_tools = request.offered_tools() is not None
    return has_tools and not text_mode and tool_mode == "auto" and says_tools_unsupported(detail)


class StreamedReply:
    """What one reply's stream has said so far, and the reply it makes when it ends.

    Text goes to `callbacks.on_text` as it arrives, through the `<tool_call>` filter in text
    tool mode; reasoning to `callbacks.on_reasoning`. A dialect reads the stream's payloads
    with `data`, decodes each with `decode`, and sets what they say: `stopped` at its final
    event, `finish_reason` (in the loop's words), the token counts the server reports, the
    tool calls, and `failure` for an error the server sent. `finish` then builds the reply."""

    __slots__ = (
        "_callbacks",
        "failure",
        "faults",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "reasoning",
        "received",
        "stopped",
        "text",
        "text_calls",
        "tool_calls",
    )

    def __init__(self, callbacks: StreamCallbacks, *, text_mode: bool) -> None:
        self._callbacks = callbacks
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.text_calls = TextToolCalls() if text_mode else None
        self.faults = StreamFaults()
        self.received = Received()
        self.stopped = False
        self.finish_reason: str | None = None
        """None: the server named none (the reply counts as finished only if it `stopped`)."""
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        """None: the server did not report it, and `finish` estimates it."""
        self.tool_calls: list[ToolCallRequest] = []
        self.failure: ModelError | None = None
        """An error the server reported, raised by `finish` once the body has been read."""

    async def data(self, response: httpx.Response) -> AsyncGenerator[str]:
        """The stream's payloads (see `sse_data`) until it stopped or failed; the rest of the
        body is read, unseen."""
        async with aclosing(sse_data(response, self.received)) as events:
            async for data in events:
                if not self.stopped and self.failure is None:
                    yield data

    def decode(self, decoder: msgspec.json.Decoder[_T], data: str) -> _T | None:
        """One payload decoded, or None for one that is not the dialect's JSON (counted in
        `faults`)."""
        try:
            event = decoder.decode(data)
        except msgspec.DecodeError as exc:
            self.faults.bad_line(data, exc)
            return None
        self.faults.decoded += 1
        return event

    def add_text(self, piece: str) -> None:
        self.text.append(piece)
        shown = self.text_calls.feed(piece) if self.text_calls else piece
        if shown:
            self._callbacks.on_text(shown)

    def add_thought(self, piece: str) -> None:
        self.reasoning.append(piece)
        self._callbacks.on_reasoning(piece)

    def finish(self, *, base_url: str, dialect_json: str, request_bytes: int) -> ModelResponse:
        """The reply the finished stream assembled; raises the server's `failure`, or what
        `StreamFaults.check` raises for a stream that cannot be used (it finished when it
        `stopped` or named a `finish_reason`). In text tool mode what the filter held back is
        streamed and the `<tool_call>` blocks join the tool calls. Token counts the server did
        not report are estimated from characters (`ModelUsage.estimated`)."""
        if self.failure is not None:
            raise self.failure
        warnings = self.faults.check(
            finished=self.stopped or self.finish_reason is not None,
            base_url=base_url,
            dialect_json=dialect_json,
            received=self.received,
        )
        tool_calls = self.tool_calls
        finish_reason = self.finish_reason or "stop"
        input_tokens = self.input_tokens
        output_tokens = self.output_tokens
        raw_text = "".join(self.text)
        visible = raw_text
        if self.text_calls is not None:
            tail, from_text = self.text_calls.finish()
            if tail:
                self._callbacks.on_text(tail)
            visible = self.text_calls.text
            if from_text:
                tool_calls = [*tool_calls, *from_text]
                finish_reason = "tool_calls"
        estimated = input_tokens is None or output_tokens is None
        if input_tokens is None:
            input_tokens = estimate_tokens(request_bytes)
        if output_tokens is None:
            out_chars = len(raw_text) + sum(len(c.arguments) + len(c.name) for c in tool_calls)
            output_tokens = estimate_tokens(out_chars)
        usage = ModelUsage(
            input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated
        )
        return ModelResponse(
            text=visible,
            reasoning="".join(self.reasoning),
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=usage,
            warnings=warnings,
        )


class DialectOptions(TypedDict, total=False):
    """`DialectClient`'s optional settings, for a dialect's own constructor to pass on."""

    api_key: str
    silence_timeout: float
    tool_mode: ToolMode
    config_hint: str
    transport: httpx.AsyncBaseTransport | None
    images: bool


class DialectClient:
    """What the clients of both dialects share: the settings, the connection pool (shared with
    `with_model` twins), the model list, and the streamed POST of a request.

    A dialect names its `provider`, the paths of its model list and of its streamed requests,
    and supplies the words of its errors (`_unreachable_hint`, `_http_error`, `_stream_fix`)."""

    provider: ClassVar[str]
    models_path: ClassVar[str]
    """The model list's path below `base_url`."""
    models_params: ClassVar[Mapping[str, int] | None] = None
    stream_path: ClassVar[str]
    """The path below `base_url` that requests are POSTed to."""
    dialect_json: ClassVar[str]
    """What its stream's lines are, for a message about lines that are not."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        silence_timeout: float = 300.0,
        tool_mode: ToolMode = "auto",
        config_hint: str = "config.toml",
        transport: httpx.AsyncBaseTransport | None = None,
        images: bool = True,
    ) -> None:
        self.model = model
        self.images = images
        """Whether the model is sent images; when not, each image of the history goes as a
        line of text naming it (the session's model changed after it was sent)."""
        self.base_url = self._api_root(base_url)
        self.tool_mode: ToolMode = tool_mode
        self.text_tools = tool_mode == "text"
        """True once tools go as text: configured, or switched to by `auto`."""
        self._config_hint = config_hint
        self._silence_timeout = silence_timeout
        # The key goes into a header only here; no line may show it, whatever quotes it.
        add_secret(api_key)
        self._http = http_client(
            self._headers(api_key),
            base_url=self.base_url,
            silence_timeout=silence_timeout,
            transport=transport,
        )

    @staticmethod
    def _api_root(base_url: str) -> str:
        """The root that the paths hang off, for a configured base URL."""
        return base_url.rstrip("/")

    @staticmethod
    def _headers(api_key: str) -> dict[str, str]:
        """The headers of every request, carrying `api_key` (empty: none)."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def aclose(self) -> None:
        await self._http.aclose()

    def with_model(self, model: str) -> Self:
        """This client calling `model` instead: the same server, key and connection pool
        (closing this client closes them for both)."""
        twin = copy.copy(self)
        twin.model = model
        return twin

    async def list_models(self) -> list[str]:
        return await fetch_model_ids(
            self._http,
            f"{self.base_url}{self.models_path}",
            params=self.models_params,
            base_url=self.base_url,
            unreachable_hint=self._unreachable_hint(),
            http_error=lambda response: self._http_error(
                response, what=f"model list ({self.models_path})"
            ),
        )

    async def _read_stream(self, response: httpx.Response, reply: StreamedReply) -> None:
        """Read the reply's stream into `reply` (see `StreamedReply`)."""
        raise NotImplementedError

    async def _post(
        self, body: bytes, callbacks: StreamCallbacks, *, text_mode: bool
    ) -> ModelResponse:
        """POST `body` and read the reply's stream; raises `Rejected` for an error status."""
        if log.enabled(DEBUG):
            # The body only: the headers carry the key.
            log.debug(
                "model request",
                provider=self.provider,
                model=self.model,
                path=self.stream_path,
                bytes=len(body),
                body=clip_bytes(body),
            )
        with transport_errors(
            self.base_url, self._unreachable_hint(), silence_timeout=self._silence_timeout
        ):
            async with self._http.stream(
                "POST",
                f"{self.base_url}{self.stream_path}",
                content=body,
                headers={"content-type": "application/json"},
            ) as response:
                await accept_stream(response, base_url=self.base_url, fix=self._stream_fix())
                reply = StreamedReply(callbacks, text_mode=text_mode)
                await self._read_stream(response, reply)
                answer = reply.finish(
                    base_url=self.base_url,
                    dialect_json=self.dialect_json,
                    request_bytes=len(body),
                )
        if log.enabled(DEBUG):
            log.debug(
                "model response",
                provider=self.provider,
                model=self.model,
                body=clip_bytes(msgspec.json.encode(answer)),
            )
        return answer

    def _unreachable_hint(self) -> str:
        """What to check when nothing answers at `base_url`."""
        raise NotImplementedError

    def _stream_fix(self) -> str:
        """What to check when a 2xx answer is not an event stream."""
        raise NotImplementedError

    def _http_error(self, response: httpx.Response, what: str = "") -> ModelHTTPError:
        """The error for an HTTP error status; `what` names the resource asked for (empty: the
        model)."""
        raise NotImplementedError

    def _status_error(
        self,
        response: httpx.Response,
        *,
        server: str,
        key_fix: str,
        not_found: Callable[[str], str],
    ) -> ModelHTTPError:
        """`status_error` for this client's model, server and config file."""
        return status_error(
            response,
            server=server,
            key_fix=key_fix,
            not_found=not_found,
            model=self.model,
            base_url=self.base_url,
            config_hint=self._config_hint,
        )
