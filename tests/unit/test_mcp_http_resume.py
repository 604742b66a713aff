"""The streamable HTTP transport resuming a broken answer stream, against scripted exchanges
(httpx `MockTransport`): where it resumes from when the stream broke inside an event, how long
it waits (the server's `retry`, else `RESUME_DELAY`: trio's virtual clock), that an answer
the server replays twice is delivered once, and that a stream the server will not resume, or
that brings nothing new attempt after attempt, fails the call without sending it again.
tests/unit/test_mcp_resume.py does the same against a real server."""

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest
import trio

from tether.daemon.mcp.errors import McpNotDelivered, McpUnavailable
from tether.daemon.mcp.http import RESUME_DELAY, HttpTransport

PROGRESS = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}'
REQUEST = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
NOTICE = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}'


class Broken(httpx.AsyncByteStream):
    """A body that stops with a read error after `chunks`, as a reset connection does."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset")


def sse(body: httpx.AsyncByteStream | bytes) -> httpx.Response:
    headers = {"content-type": "text/event-stream"}
    if isinstance(body, bytes):
        return httpx.Response(200, headers=headers, content=body)
    return httpx.Response(200, headers=headers, stream=body)


async def exchange(first: bytes) -> tuple[list[object], list[httpx.Request], float]:
    """Send REQUEST over a POST whose answer stream is `first` then broken, and a resume
    that replays ANSWER twice: what was delivered, the requests, the virtual time taken."""
    requests: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.method == "POST":
            return sse(Broken(first, b"id: 9\ndata: " + ANSWER[:10]))
        return sse(b"id: 3\ndata: " + ANSWER + b"\n\nid: 3\ndata: " + ANSWER + b"\n\n")

    delivered: list[object] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        transport = HttpTransport("http://mcp.test/mcp", {}, name="scripted", client=client)
        transport.session_id = "s-1"
        transport.negotiated("2025-11-25")
        start = trio.current_time()
        await transport.send(REQUEST, delivered.append)
    return delivered, requests, trio.current_time() - start


@pytest.mark.parametrize(("retry", "waited"), [(b"retry: 250\n", 0.25), (b"", RESUME_DELAY)])
async def test_a_broken_stream_resumes_after_its_last_whole_event_and_answers_once(
    autojump_clock: trio.abc.Clock, retry: bytes, waited: float
) -> None:
    first = b"id: 1\n" + retry + b"data: \n\nid: 2\ndata: " + PROGRESS + b"\n\n"
    delivered, requests, took = await exchange(first)
    assert delivered == [msgspec.json.decode(PROGRESS), msgspec.json.decode(ANSWER)]
    post, get = requests
    assert post.method == "POST"
    assert get.method == "GET"
    assert get.headers["last-event-id"] == "2"  # not the 9 of the event cut in half
    assert get.headers["mcp-session-id"] == "s-1"
    assert get.headers["accept"] == "text/event-stream"
    assert took == pytest.approx(waited)


@pytest.mark.parametrize(
    ("status", "why"),
    [(405, "did not resume it (HTTP 405"), (200, "3 attempts to resume it failed")],
)
async def test_a_stream_that_cannot_be_resumed_fails_the_call_and_ends_the_transport(
    autojump_clock: trio.abc.Clock, status: int, why: str
) -> None:
    requests: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.method == "POST":
            return sse(Broken(b"id: 1\ndata: \n\n"))
        if status == 405:
            return httpx.Response(405, text="GET is not offered")
        return sse(Broken(b": nothing new\n\n"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        transport = HttpTransport("http://mcp.test/mcp", {}, name="scripted", client=client)
        transport.negotiated("2025-11-25")
        with pytest.raises(McpUnavailable) as failed:
            await transport.send(REQUEST, lambda _message: None)
        with pytest.raises(McpUnavailable):
            await transport.serve(lambda _message: None)  # ended: the pool reconnects
    assert not isinstance(failed.value, McpNotDelivered)  # it may have acted: not sent again
    assert "the connection was lost" in str(failed.value)
    assert why in str(failed.value)
    assert [request.method for request in requests].count("POST") == 1
    assert all(request.headers["last-event-id"] == "1" for request in requests[1:])


@pytest.mark.parametrize(
    ("version", "message"),
    [("2026-07-28", REQUEST), ("2025-11-25", NOTICE)],
    ids=["2026-07-28, which has no resumption", "a notification, which awaits no answer"],
)
async def test_a_broken_stream_is_not_resumed(version: str, message: bytes) -> None:
    requests: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return sse(Broken(b"id: 1\ndata: " + PROGRESS + b"\n\n"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        transport = HttpTransport("http://mcp.test/mcp", {}, name="scripted", client=client)
        transport.negotiated(version)
        with pytest.raises(McpUnavailable, match="the connection was lost"):
            await transport.send(message, lambda _message: None)
    assert [request.method for request in requests] == ["POST"]
