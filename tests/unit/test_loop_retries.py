"""Retries of the model call, in virtual time: the real provider clients over httpx's stack (a
`MockTransport` replaying streams, or a hung server on loopback), the turn loop, a recording
sink. Backoff and silence timeouts pass under trio's `autojump_clock`, not on the wall clock."""

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tether.daemon.context.history import History
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import Message, ModelClient
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.turn.loop import MAX_RETRIES, UNREACHABLE_RETRY_SECONDS, TurnLoop
from tether.protocol.items import AgentMessage, AnyItem, Notice, Reasoning, UserMessage
from tether.protocol.session import QueuedInput

DIALECTS = ["openai", "anthropic"]


class Sink:
    def __init__(self) -> None:
        self.completed: list[AnyItem] = []
        self.retries: list[tuple[int, int, float, str]] = []

    def item_started(self, item: AnyItem) -> None:
        pass

    def item_delta(self, item_id: str, delta: str) -> None:
        pass

    def item_completed(self, item: AnyItem) -> None:
        self.completed.append(item)

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        self.retries.append((attempt, max_attempts, delay, reason))

    def take_queued(self) -> list[QueuedInput]:
        return []

    def open_todos(self) -> list[str]:
        return []


# --- streams in either dialect ---------------------------------------------------------------


def openai_stream(text: str = "", call: tuple[str, str] | None = None) -> bytes:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"content": text[i : i + 4]}}]}
        for i in range(0, len(text), 4)
    ]
    if call is not None:
        function = {"name": call[0], "arguments": call[1]}
        delta = {"tool_calls": [{"index": 0, "id": "call_1", "function": function}]}
        chunks.append({"choices": [{"index": 0, "delta": delta}]})
    finish = "tool_calls" if call else "stop"
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: %s\n\n" % json.dumps(c).encode() for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def anthropic_stream(text: str = "", call: tuple[str, str] | None = None) -> bytes:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {}}]
    if text:
        events.append(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        )
        events += [
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text[i : i + 4]},
            }
            for i in range(0, len(text), 4)
        ]
        events.append({"type": "content_block_stop", "index": 0})
    if call is not None:
        block: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": call[0], "input": {}}
        events.append({"type": "content_block_start", "index": 1, "content_block": block})
        events.append(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": call[1]},
            }
        )
        events.append({"type": "content_block_stop", "index": 1})
    stop = "tool_use" if call else "end_turn"
    events.append({"type": "message_delta", "delta": {"stop_reason": stop}})
    events.append({"type": "message_stop"})
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode()) for e in events
    )


STREAMS: dict[str, Callable[..., bytes]] = {
    "openai": openai_stream,
    "anthropic": anthropic_stream,
}


class Pieces(httpx.AsyncByteStream):
    """A body in small pieces, optionally breaking off after `cut` bytes."""

    def __init__(self, body: bytes, cut: int | None = None) -> None:
        self.body = body if cut is None else body[:cut]
        self.broken = cut is not None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), 16):
            yield self.body[start : start + 16]
        if self.broken:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def sse(body: bytes, cut: int | None = None) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Pieces(body, cut)
    )


class Replies:
    """Answers each request with the next reply, noting the (virtual) time it arrived."""

    def __init__(self, *replies: httpx.Response) -> None:
        self.replies = list(replies)
        self.times: list[float] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.times.append(trio.current_time())
        self.bodies.append(json.loads(request.content))
        return self.replies.pop(0)


def client_for(
    dialect: str, *, transport: httpx.AsyncBaseTransport, base_url: str = "http://model.test"
) -> ModelClient:
    if dialect == "anthropic":
        return AnthropicMessagesClient(base_url=base_url, model="m", transport=transport)
    return OpenAIChatClient(base_url=f"{base_url}/v1", model="m", transport=transport)


def loop_over(client: ModelClient, workspace: Path, sink: Sink) -> TurnLoop:
    history = History("system")
    history.add_user("go")
    return TurnLoop(
        model=client,
        tools=ToolRegistry(default_tools()),
        tool_context=lambda _item: ToolContext(workspace),
        history=history,
        sink=sink,
        new_id=iter(f"i{n}" for n in range(1, 1000)).__next__,
    )


def conversation(messages: list[Message]) -> list[tuple[str, str, list[str], str]]:
    return [
        (m.role, m.content, [f"{c.name}{c.arguments}" for c in m.tool_calls], m.tool_call_id)
        for m in messages
    ]


# --- a dropped stream ----------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_dropped_stream_is_retried_and_its_partial_text_superseded(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    stream = STREAMS[dialect]
    partial = stream("a partial answer that breaks off")
    replies = Replies(
        sse(partial, cut=len(partial) * 2 // 3),
        sse(stream(call=("list_dir", '{"path": "."}'))),
        sse(stream("done")),
    )
    client = client_for(dialect, transport=httpx.MockTransport(replies))
    sink = Sink()
    loop = loop_over(client, tmp_path, sink)
    outcome = await loop.run()
    await client.aclose()

    assert outcome.status == "completed"
    ((attempt, most, _, reason),) = sink.retries
    assert (attempt, most) == (1, MAX_RETRIES)
    assert "broke off" in reason
    assert 0.75 <= replies.times[1] - replies.times[0] <= 1.25  # the backoff, in virtual time
    messages = [i for i in sink.completed if isinstance(i, AgentMessage)]
    assert [(m.step, m.superseded) for m in messages] == [(1, True), (2, False)]
    assert messages[0].text.startswith("a par")
    assert messages[1].text == "done"
    # The model never sees the cut text, and a history rebuilt from the items agrees.
    assistant = [m for m in loop.history.messages if m.role == "assistant"]
    assert [(m.content, len(m.tool_calls)) for m in assistant] == [("", 1), ("done", 0)]
    rebuilt = History("system")
    rebuilt.rebuild([UserMessage(id="u", text="go"), *sink.completed])
    assert conversation(rebuilt.messages) == conversation(loop.history.messages)


async def test_cut_reasoning_is_superseded_too(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    thought = {"choices": [{"index": 0, "delta": {"reasoning_content": "Let me think"}}]}
    cut = b"data: %s\n\n" % json.dumps(thought).encode()
    replies = Replies(
        httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=Pieces(cut + b"data: {", cut=len(cut) + 3),
        ),
        sse(openai_stream("answer")),
    )
    client = client_for("openai", transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()
    assert outcome.status == "completed"
    (reasoning,) = [i for i in sink.completed if isinstance(i, Reasoning)]
    assert (reasoning.text, reasoning.superseded) == ("Let me think", True)


async def test_a_reply_that_fails_for_good_keeps_its_partial_text(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    partial = openai_stream("half of it")
    replies = Replies(*(sse(partial, cut=len(partial) // 2) for _ in range(MAX_RETRIES + 1)))
    client = client_for("openai", transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()
    assert outcome.status == "failed"
    messages = [i for i in sink.completed if isinstance(i, AgentMessage)]
    assert [m.superseded for m in messages] == [True] * MAX_RETRIES + [False]


# --- a server that cannot be reached -------------------------------------------------------


class Refusing:
    """Refuses the first `refusals` connections the way httpx reports it, then answers with
    `reply`; notes the (virtual) time of each attempt."""

    def __init__(self, refusals: int, reply: httpx.Response | None = None) -> None:
        self.refusals = refusals
        self.reply = reply
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.times.append(trio.current_time())
        if len(self.times) <= self.refusals or self.reply is None:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return self.reply


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_refused_connection_is_tried_once_more_then_fails_with_one_notice(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    refusing = Refusing(refusals=10)
    client = client_for(dialect, transport=httpx.MockTransport(refusing))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.code == "model_unreachable"
    assert refusing.times == pytest.approx([0, UNREACHABLE_RETRY_SECONDS])
    assert sink.retries == []  # nothing to announce: the one message is the failure's
    (notice,) = [i for i in sink.completed if isinstance(i, Notice)]
    assert (notice.level, notice.code) == ("error", "model_unreachable")
    assert notice.message == outcome.error.message
    assert "Could not reach the model server" in notice.message
    assert [i for i in sink.completed if isinstance(i, AgentMessage)] == []


async def test_a_server_that_answers_the_second_try_completes_the_turn(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    refusing = Refusing(refusals=1, reply=sse(openai_stream("back up")))
    client = client_for("openai", transport=httpx.MockTransport(refusing))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()

    assert outcome.status == "completed"
    assert refusing.times == pytest.approx([0, UNREACHABLE_RETRY_SECONDS])
    assert sink.retries == []
    assert [i.text for i in sink.completed if isinstance(i, AgentMessage)] == ["back up"]


async def test_a_busy_server_is_still_retried_three_times(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    busy = httpx.Response(503, json={"error": {"message": "overloaded"}})
    replies = Replies(*([busy] * MAX_RETRIES), sse(openai_stream("made it")))
    client = client_for("openai", transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()

    assert outcome.status == "completed"
    assert [(a, m) for a, m, _, _ in sink.retries] == [(n, MAX_RETRIES) for n in (1, 2, 3)]
    assert len(replies.times) == MAX_RETRIES + 1


# --- what cannot succeed is not retried ----------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_html_page_fails_the_turn_at_once_saying_what_came(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    page = httpx.Response(
        200, headers={"content-type": "text/html"}, content=b"<html><h1>Log in to the proxy</h1>"
    )
    replies = Replies(page, sse(STREAMS[dialect]("never asked")))
    client = client_for(dialect, transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "text/html, not an event stream" in outcome.error.message
    assert "Log in to the proxy" in outcome.error.message
    assert (sink.retries, len(replies.times)) == ([], 1)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_skipped_line_becomes_a_warning_notice(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    body = STREAMS[dialect]("all of the answer")
    head, rest = body.split(b"\n\n", 1)
    replies = Replies(sse(head + b"\n\ndata: {oops\n\n" + rest))
    client = client_for(dialect, transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()
    assert outcome.status == "completed"
    assert [i.text for i in sink.completed if isinstance(i, AgentMessage)] == ["all of the answer"]
    (notice,) = [i for i in sink.completed if isinstance(i, Notice)]
    assert (notice.level, notice.code) == ("warning", "model_stream")
    assert "'{oops'" in notice.message
    assert sink.retries == []


# --- Retry-After over HTTP -------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_rate_limit_waits_for_retry_after(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    limited = httpx.Response(
        429, headers={"retry-after": "2"}, json={"error": {"message": "slow down"}}
    )
    replies = Replies(limited, sse(STREAMS[dialect]("made it")))
    client = client_for(dialect, transport=httpx.MockTransport(replies))
    sink = Sink()
    outcome = await loop_over(client, tmp_path, sink).run()
    await client.aclose()
    assert outcome.status == "completed"
    assert [(a, m, d) for a, m, d, _ in sink.retries] == [(1, MAX_RETRIES, 2.0)]
    assert "rate-limiting requests (HTTP 429" in sink.retries[0][3]
    assert replies.times[1] - replies.times[0] == pytest.approx(2.0)


# --- a hung server ---------------------------------------------------------------------------


class HungServer:
    """An HTTP server on loopback, in this trio run, that reads each request and never
    answers: the client's real read timeout (httpcore's `trio.fail_after`) runs out in virtual
    time under `autojump_clock`."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.port = 0

    async def serve(
        self, *, task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            data = await stream.receive_some(65536)
            if not data:
                return
            received += data
        self.arrivals.append(trio.current_time())
        await trio.sleep_forever()


@pytest.fixture
def hung() -> HungServer:
    return HungServer()


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_hung_server_is_retried_once_then_fails_the_turn(
    dialect: str, tmp_path: Path, autojump_clock: trio.abc.Clock, hung: HungServer
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(hung.serve)
        client = (
            AnthropicMessagesClient(base_url=f"http://127.0.0.1:{hung.port}", model="m")
            if dialect == "anthropic"
            else OpenAIChatClient(base_url=f"http://127.0.0.1:{hung.port}/v1", model="m")
        )
        sink = Sink()
        start = trio.current_time()
        outcome = await loop_over(client, tmp_path, sink).run()
        elapsed = trio.current_time() - start
        await client.aclose()
        nursery.cancel_scope.cancel()

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.code == "model_timeout"
    assert "nothing arrived for 300 s" in outcome.error.message
    assert "stayed silent twice" in outcome.error.message
    assert len(hung.arrivals) == 2
    ((attempt, _, delay, reason),) = sink.retries
    assert attempt == 1
    assert "Retrying once: if it stays silent again, the turn fails." in reason
    # Two silence timeouts of 300 s (virtual) and one backoff, not four timeouts.
    assert hung.arrivals[1] - hung.arrivals[0] == pytest.approx(300 + delay, abs=0.01)
    assert elapsed == pytest.approx(600 + delay, abs=0.01)
