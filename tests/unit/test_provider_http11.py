"""tether's own HTTP/1.1 transport for plain-HTTP model servers, against scripted servers on
127.0.0.1 that answer each request with given bytes: keep-alive, the ways a body can end, and
the failures, which reach the loop as the same `ModelError`s as through httpx's transport."""

import gzip
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

from tether.daemon.providers.base import (
    Message,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelTimeout,
    ModelUnreachable,
    QuietCallbacks,
)
from tether.daemon.providers.http11 import PlainHTTPTransport
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.providers.wire import model_transport

STREAM = (
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
SSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


def with_length(body: bytes = STREAM, head: bytes = SSE) -> bytes:
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


def answer_with_length(index: int) -> bytes:
    return with_length()


def chunked(body: bytes = STREAM) -> bytes:
    middle = len(body) // 2
    pieces = b""
    for piece in (body[:middle], body[middle:]):
        pieces += b"%x;ext=1\r\n" % len(piece) + piece + b"\r\n"
    return SSE + b"transfer-encoding: chunked\r\n\r\n" + pieces + b"0\r\nx-trailer: 1\r\n\r\n"


class Server:
    """Answers the requests on each connection in turn with `answer(index)` (the request's
    number, from 0), then closes the connection when told to or when the answer is None."""

    def __init__(self, answer: Callable[[int], bytes | None]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self.close_after_each = False
        self.closed = trio.Event()
        """Set when the server has closed a connection."""

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        try:
            await self._serve(stream)
        finally:
            await stream.aclose()
            self.closed.set()

    async def _serve(self, stream: trio.SocketStream) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            while len(buffer) < length:
                buffer += await stream.receive_some(65536)
            self.requests.append(head + b"\r\n\r\n" + buffer[:length])
            buffer = buffer[length:]
            reply = self.answer(len(self.requests) - 1)
            if reply is None:
                return
            await stream.send_all(reply)
            if self.close_after_each:
                return

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@asynccontextmanager
async def serving(answer: Callable[[int], bytes | None]) -> AsyncGenerator[Server]:
    server = Server(answer)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, server.handle, 0)
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


def request() -> ModelRequest:
    return ModelRequest(
        messages=[Message(role="system", content="s"), Message(role="user", content="hi")]
    )


async def ask(client: OpenAIChatClient) -> str:
    return (await client.complete(request(), QuietCallbacks())).text


def client_for(server: Server) -> OpenAIChatClient:
    return OpenAIChatClient(base_url=server.base_url, model="m", api_key="sk-test")


def test_a_plain_http_base_url_streams_through_tethers_transport_and_https_through_httpx() -> None:
    assert isinstance(model_transport("http://127.0.0.1:11434/v1", None), PlainHTTPTransport)
    assert isinstance(model_transport("HTTP://localhost/v1", None), PlainHTTPTransport)
    assert isinstance(model_transport("https://api.example/v1", None), httpx.AsyncHTTPTransport)
    given = httpx.MockTransport(lambda r: httpx.Response(500))
    assert model_transport("http://127.0.0.1/v1", given) is given


async def test_requests_reuse_one_connection_and_carry_httpxs_headers() -> None:
    async with serving(lambda index: with_length() if index % 2 else chunked()) as server:
        client = client_for(server)
        assert [await ask(client) for _ in range(4)] == ["Hello"] * 4
        await client.aclose()
    assert server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    headers = {
        name.lower(): value.strip()
        for name, _, value in (line.partition(b":") for line in lines[1:])
    }
    assert headers[b"host"] == f"127.0.0.1:{server.port}".encode()
    assert headers[b"authorization"] == b"Bearer sk-test"
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert headers[b"user-agent"].startswith(b"python-httpx/")
    assert b'"model":"m"' in body


async def test_a_body_that_ends_with_the_connection_is_read_and_the_next_request_reconnects() -> (
    None
):
    def answer(index: int) -> bytes:
        return SSE + b"\r\n" + STREAM  # neither a length nor chunks: the body ends at the close

    async with serving(answer) as server:
        server.close_after_each = True
        client = client_for(server)
        assert [await ask(client), await ask(client)] == ["Hello", "Hello"]
        await client.aclose()
    assert server.connections == 2


async def test_a_connection_the_server_said_it_closes_is_not_reused() -> None:
    head = SSE + b"connection: close\r\n"
    async with serving(lambda index: with_length(head=head)) as server:
        server.close_after_each = True
        client = client_for(server)
        assert [await ask(client), await ask(client)] == ["Hello", "Hello"]
        await client.aclose()
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async with serving(lambda index: with_length()) as server:
        server.close_after_each = True  # closes after answering, without saying so
        client = client_for(server)
        assert await ask(client) == "Hello"
        await server.closed.wait()
        assert await ask(client) == "Hello"
        await client.aclose()
    assert server.connections == 2


async def test_an_interim_answer_is_skipped() -> None:
    async with serving(lambda index: b"HTTP/1.1 100 Continue\r\n\r\n" + with_length()) as server:
        client = client_for(server)
        assert await ask(client) == "Hello"
        await client.aclose()


async def test_a_rate_limit_answer_is_retryable_with_the_servers_wait() -> None:
    body = b'{"error":{"message":"slow down"}}'
    head = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 7\r\n"
    async with serving(lambda index: with_length(body, head)) as server:
        client = client_for(server)
        with pytest.raises(ModelHTTPError) as caught:
            await ask(client)
        # The error body was read to its end, so the connection serves the next request.
        server.answer = answer_with_length
        assert await ask(client) == "Hello"
        await client.aclose()
    assert caught.value.status == 429
    assert caught.value.retryable
    assert caught.value.retry_after == 7
    assert "slow down" in caught.value.message
    assert server.connections == 1


async def test_nothing_listening_is_unreachable() -> None:
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        client = OpenAIChatClient(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        with pytest.raises(ModelUnreachable) as caught:
            await ask(client)
        await client.aclose()
    assert caught.value.retryable
    assert f"127.0.0.1:{port}" in caught.value.message


@pytest.mark.parametrize(
    "reply",
    [
        SSE + b"content-length: 9999\r\n\r\n" + STREAM,  # ends short of its length
        SSE + b"transfer-encoding: chunked\r\n\r\n40\r\n" + STREAM[:20],  # in a chunk
        SSE[:20],  # in the head
        b"",  # before any answer
    ],
)
async def test_an_answer_that_breaks_off_is_a_retryable_protocol_error(reply: bytes) -> None:
    async with serving(lambda index: reply) as server:
        server.close_after_each = True
        client = client_for(server)
        with pytest.raises(ModelProtocolError) as caught:
            await ask(client)
        await client.aclose()
    assert caught.value.retryable
    assert "broke off" in caught.value.message


@pytest.mark.parametrize(
    "reply",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        SSE + b" folded: header\r\n\r\n",
        SSE + b"content-length: 1, 2\r\n\r\n",
        SSE + b"transfer-encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_an_answer_that_is_not_http_is_a_protocol_error(reply: bytes) -> None:
    async with serving(lambda index: reply) as server:
        server.close_after_each = True
        client = client_for(server)
        with pytest.raises(ModelProtocolError):
            await ask(client)
        await client.aclose()


async def test_a_silent_server_times_out(autojump_clock: trio.abc.Clock) -> None:
    never = trio.Event()

    async def silent(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await never.wait()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, silent, 0)
        port = listeners[0].socket.getsockname()[1]
        client = OpenAIChatClient(
            base_url=f"http://127.0.0.1:{port}/v1", model="m", silence_timeout=30.0
        )
        with pytest.raises(ModelTimeout) as caught:
            await ask(client)
        await client.aclose()
        nursery.cancel_scope.cancel()
    assert "30 s" in caught.value.message


async def test_cancelling_a_call_closes_its_connection() -> None:
    answered = trio.Event()

    def answer(index: int) -> bytes:
        answered.set()
        return SSE + b"transfer-encoding: chunked\r\n\r\n"  # and then nothing

    async with serving(answer) as server:
        client = client_for(server)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, client)
                await answered.wait()
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        await server.closed.wait()  # the server saw the client close the connection
        await client.aclose()


async def test_a_closed_transport_keeps_no_connection() -> None:
    async with serving(lambda index: with_length()) as server:
        transport = PlainHTTPTransport()
        url = f"{server.base_url}/chat/completions"
        response = await transport.handle_async_request(httpx.Request("POST", url, content=b"{}"))
        assert await response.aread() == STREAM
        await response.aclose()
        await transport.aclose()
        response = await transport.handle_async_request(httpx.Request("POST", url, content=b"{}"))
        await response.aread()
        await response.aclose()
        await transport.aclose()
    assert server.connections == 2


async def test_an_https_url_is_not_sent_in_plain_text() -> None:
    transport = PlainHTTPTransport()
    with pytest.raises(httpx.UnsupportedProtocol):
        await transport.handle_async_request(httpx.Request("POST", "https://x.test/", content=b""))


@pytest.mark.parametrize("base_url", ["http:///v1", "localhost:11434/v1", "ftp://x.test/v1"])
async def test_a_base_url_that_is_not_http_is_refused_without_a_retry(base_url: str) -> None:
    client = OpenAIChatClient(base_url=base_url, model="m")
    with pytest.raises(ModelError) as caught:
        await ask(client)
    await client.aclose()
    assert type(caught.value) is ModelError
    assert not caught.value.retryable
    assert "is not an http(s) URL" in caught.value.message


async def test_the_model_list_comes_over_the_same_connection_as_the_calls() -> None:
    listing = b'{"data":[{"id":"qwen3"},{"id":"llama3"}]}'
    json_head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    async with serving(
        lambda index: with_length(listing, json_head) if index == 0 else chunked()
    ) as server:
        client = client_for(server)
        assert await client.list_models() == ["llama3", "qwen3"]
        assert await ask(client) == "Hello"
        await client.aclose()
    assert server.requests[0].startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert server.requests[0].endswith(b"\r\n\r\n")  # no body
    assert server.connections == 1


async def test_a_compressed_stream_is_decoded_as_httpx_decodes_it() -> None:
    head = SSE + b"content-encoding: gzip\r\n"
    async with serving(lambda index: with_length(gzip.compress(STREAM), head)) as server:
        client = client_for(server)
        assert await ask(client) == "Hello"
        await client.aclose()
    assert b"accept-encoding: gzip" in server.requests[0].lower()


async def test_calls_at_the_same_time_take_a_connection_each_and_both_are_kept() -> None:
    both_asked = trio.Event()

    def answer(index: int) -> bytes:
        return with_length()

    async with serving(answer) as server:
        client = client_for(server)
        replies: list[str] = []

        async def call() -> None:
            replies.append(await ask(client))
            if len(replies) == 2:
                both_asked.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            nursery.start_soon(call)
        await both_asked.wait()
        assert server.connections == 2
        for _ in range(4):  # then both wait idle, and serve the next calls
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, client)
                nursery.start_soon(ask, client)
        await client.aclose()
    assert replies == ["Hello", "Hello"]
    assert server.connections == 2
