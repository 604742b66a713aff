"""Reading a reply's server-sent-event stream: the `data:` lines, what went wrong in them,
and the reply they make (`StreamedReply`).

One undecodable `data:` line in a stream that otherwise finishes is skipped, and the reply
carries a warning saying so (`ModelResponse.warnings`): the rest of the reply is intact, and
failing would throw it away for a fault that repeating the request is unlikely to mend. A
stream that does not finish, or in which nothing could be read, fails instead. So does one
whose skipped lines leave no answer (no text, no tool call), as a stream that broke off does,
retryable: an empty reply is not the model's answer, and a completed turn would claim it was.
"""

import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar, cast

import httpx
import msgspec
import trio

from tether.daemon.providers.base import (
    ModelError,
    ModelProtocolError,
    ModelResponse,
    ModelUsage,
    StreamCallbacks,
    ToolCallRequest,
)
from tether.daemon.providers.errors import EXCERPT_CHARS, Rejected, error_detail, excerpt
from tether.daemon.providers.texttools import TextToolCalls

EVENT_STREAM = "text/event-stream"
CHARS_PER_TOKEN = 3.5
"""Token estimate for servers that report no usage."""

_T = TypeVar("_T")


def estimate_tokens(chars: int) -> int:
    return round(chars / CHARS_PER_TOKEN)


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
LINES_PER_CHECKPOINT = 16
"""How many lines of one network read `sse_data` hands on between two checkpoints."""


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
            since_read = 0
            for line in lines:
                if line.startswith("data:"):
                    data = line[5:].strip()
                    if not data:
                        continue
                    received.data_lines += 1
                    # One network read can hold thousands of lines; let the connections'
                    # writers run between runs of them so that a burst does not pile up in
                    # every client's queue. The read itself was a checkpoint, and a
                    # checkpoint per line would cost a pass of the scheduler each.
                    since_read += 1
                    if since_read % LINES_PER_CHECKPOINT == 0:
                        await trio.lowlevel.checkpoint()
                    yield data


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
        self, *, finished: bool, empty: bool, base_url: str, dialect_json: str, received: Received
    ) -> list[str]:
        """Raise when the stream cannot be used (`empty`: it made no text and no tool call);
        otherwise the warnings for the reply."""
        if finished and not self.skipped:
            return []
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
        if empty:
            raise ModelProtocolError(
                f"The stream from {base_url} finished with no answer: it held {bad}:"
                f" {self.first_error}) and nothing else the answer could be made of.",
                retryable=True,
            )
        return [f"Skipped {bad}) in the stream from {base_url}; the reply may lack a piece."]


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
            empty=not any(self.text) and not self.tool_calls,
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
