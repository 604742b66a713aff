"""What the provider clients' tests replay recorded streams with, through `httpx.MockTransport`:
a body served in small pieces (so SSE lines straddle reads), the streamed response, the stream
callbacks that collect what arrived, and the tool set both suites offer the model."""

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec

from tether.daemon.providers.base import ToolSet, ToolSpec

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]
"""What a recorder answers a request with: a response, or a function of the request."""


class Trickle(httpx.AsyncByteStream):
    """Serves `body` `size` bytes at a time, then raises `fail` if given (a connection that
    breaks off)."""

    def __init__(self, body: bytes, size: int = 7, fail: Exception | None = None) -> None:
        self.body = body
        self.size = size
        self.fail = fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.size):
            yield self.body[start : start + self.size]
        if self.fail is not None:
            raise self.fail


def streamed(body: bytes, **kw: Any) -> httpx.Response:
    """A 200 event stream of `body` (`size`, `fail` as `Trickle` takes them)."""
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Trickle(body, **kw)
    )


class Collect:
    """Stream callbacks that keep the text and reasoning deltas, in order."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def on_text(self, delta: str) -> None:
        self.text.append(delta)

    def on_reasoning(self, delta: str) -> None:
        self.reasoning.append(delta)


SCHEMA = b'{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}'


def toolset() -> ToolSet:
    """Two tools taking a `path`: read_file and list_dir."""
    return ToolSet(
        specs=[
            ToolSpec(name="read_file", description="Read a file.", parameters=msgspec.Raw(SCHEMA)),
            ToolSpec(name="list_dir", description="List a folder.", parameters=msgspec.Raw(SCHEMA)),
        ]
    )
