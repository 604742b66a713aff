"""The OpenAI chat-completions client through httpx's real stack, against recorded streams
replayed by `httpx.MockTransport`. A recorder checks every request it sends."""

# ruff: noqa: E501  (recorded streams keep their real, long lines)

import itertools
import json
import time
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from tests.replay import SCHEMA, Collect, Reply, streamed, toolset
from tether.daemon.providers.base import (
    Message,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelTimeout,
    ModelUnreachable,
    ToolCallRequest,
)
from tether.daemon.providers.openai import OpenAIChatClient

BASE = "http://model.test/v1"

# A stream as vLLM serves a reasoning model (abridged ids): reasoning first, then text, then two
# tool calls whose argument fragments arrive interleaved by index, the finish reason, and the
# usage chunk that `stream_options.include_usage` asks for.
RECORDED_REASONING_AND_TWO_CALLS = b"""\
data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"The user wants"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":" the README and src."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"content":"I'll look at"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"content":" both."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-a1","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"pa"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"chatcmpl-tool-b2","type":"function","function":{"name":"list_dir","arguments":"{\\"path\\""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\\": \\"README.md\\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \\"src\\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]}

data: {"id":"chatcmpl-7b1","object":"chat.completion.chunk","created":1733300000,"model":"qwen3","choices":[],"usage":{"prompt_tokens":812,"total_tokens":876,"completion_tokens":64}}

data: [DONE]

"""

# Ollama without stream_options: text only, no usage chunk.
RECORDED_TEXT_NO_USAGE = b"""\
data: {"id":"chatcmpl-417","object":"chat.completion.chunk","created":1733300001,"model":"gemma3","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}

data: {"id":"chatcmpl-417","object":"chat.completion.chunk","created":1733300001,"model":"gemma3","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":" there."},"finish_reason":null}]}

data: {"id":"chatcmpl-417","object":"chat.completion.chunk","created":1733300001,"model":"gemma3","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}

data: [DONE]

"""


def sse(*deltas: dict[str, Any], finish: str = "stop", usage: bool = False) -> bytes:
    """A small chat-completions stream: one chunk per delta, the finish chunk, [DONE]."""
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    lines = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return b"".join(lines) + b"data: [DONE]\n\n"


def error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"error": {"message": message, "type": "invalid_request_error"}},
        headers=headers,
    )


class Recorder:
    """Answers requests with the given replies, in order, and checks every request body:
    each tool result answers a call of the assistant message right before it, every call is
    answered, and a request without `tools` carries no native tool messages."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "POST":
            body = json.loads(request.content)
            self.check(body)
            self.bodies.append(body)
        reply = self.replies.pop(0)
        return reply if isinstance(reply, httpx.Response) else reply(request)

    @staticmethod
    def check(body: dict[str, Any]) -> None:
        assert body["stream"] is True
        messages: list[dict[str, Any]] = body["messages"]
        assert messages[0]["role"] == "system"
        open_calls: set[str] = set()
        for message in messages:
            if message["role"] == "tool":
                assert message["tool_call_id"] in open_calls, "a result answers no call"
                open_calls.remove(message["tool_call_id"])
                continue
            assert not open_calls, f"calls left unanswered: {open_calls}"
            if message["role"] == "assistant":
                open_calls = {c["id"] for c in message.get("tool_calls", [])}
        if "tools" not in body:
            assert all(m["role"] != "tool" and "tool_calls" not in m for m in messages)
            # Text mode: each user message answers the previous reply's blocks, in order.
            for before, message in itertools.pairwise(messages):
                if before["role"] == "assistant" and message["role"] == "user":
                    calls = before["content"].count("<tool_call>")
                    assert message["content"].count("<tool_result ") == calls


def conversation() -> list[Message]:
    """A system prompt, a question, a reply with two calls, both results and a follow-up."""
    return [
        Message(role="system", content="You are terse."),
        Message(role="user", content="What is here?"),
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=[
                ToolCallRequest(id="c1", name="read_file", arguments='{"path": "README.md"}'),
                ToolCallRequest(id="c2", name="list_dir", arguments='{"path": "."}'),
            ],
        ),
        Message(role="tool", content="# Demo", tool_call_id="c1", tool_name="read_file"),
        Message(role="tool", content="README.md\nsrc/", tool_call_id="c2", tool_name="list_dir"),
        Message(role="user", content="And src?"),
    ]


def make_client(recorder: Recorder, **kw: Any) -> OpenAIChatClient:
    return OpenAIChatClient(
        base_url=BASE, model="qwen3", transport=httpx.MockTransport(recorder), **kw
    )


async def test_recorded_stream_assembles_reasoning_text_and_interleaved_calls() -> None:
    recorder = Recorder(streamed(RECORDED_REASONING_AND_TWO_CALLS))
    client = make_client(recorder, api_key="sk-test")
    seen = Collect()
    messages = conversation()[:2]
    response = await client.complete(ModelRequest(messages=messages, tools=toolset()), seen)
    await client.aclose()

    assert response.text == "I'll look at both."
    assert response.reasoning == "The user wants the README and src."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("chatcmpl-tool-a1", "read_file", {"path": "README.md"}),
        ("chatcmpl-tool-b2", "list_dir", {"path": "src"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (812, 64)
    assert not response.usage.estimated
    assert seen.text == ["I'll look at", " both."]
    assert seen.reasoning == ["The user wants", " the README and src."]

    (request,) = recorder.requests
    assert str(request.url) == f"{BASE}/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert recorder.bodies == [
        {
            "model": "qwen3",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is here?"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": description,
                        "parameters": json.loads(SCHEMA),
                    },
                }
                for name, description in [
                    ("read_file", "Read a file."),
                    ("list_dir", "List a folder."),
                ]
            ],
        }
    ]


async def test_history_goes_out_in_chat_completions_form_encoded_once() -> None:
    recorder = Recorder(streamed(sse({"content": "ok"})), streamed(sse({"content": "ok"})))
    client = make_client(recorder)
    messages = conversation()
    await client.complete(ModelRequest(messages=messages, tools=toolset()), Collect())
    cached = [m.cache["openai"] for m in messages]
    await client.complete(ModelRequest(messages=messages, tools=toolset()), Collect())
    assert [m.cache["openai"] for m in messages] == cached
    assert all(a is b for a, b in zip(cached, (m.cache["openai"] for m in messages), strict=True))
    await client.aclose()
    assert recorder.bodies[0]["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                    "type": "function",
                },
                {
                    "id": "c2",
                    "function": {"name": "list_dir", "arguments": '{"path": "."}'},
                    "type": "function",
                },
            ],
        },
        {"role": "tool", "content": "# Demo", "tool_call_id": "c1"},
        {"role": "tool", "content": "README.md\nsrc/", "tool_call_id": "c2"},
        {"role": "user", "content": "And src?"},
    ]


async def test_a_cookie_the_server_sets_is_never_sent_back() -> None:
    first = streamed(sse({"content": "ok"}))
    first.headers["set-cookie"] = "session=abc; Path=/"
    recorder = Recorder(first, streamed(sse({"content": "ok"})))
    client = make_client(recorder)
    await client.complete(simple_request(), Collect())
    await client.complete(simple_request(), Collect())
    await client.aclose()
    assert [r.headers.get("cookie") for r in recorder.requests] == [None, None]


def simple_request() -> ModelRequest:
    return ModelRequest(messages=conversation()[:2], tools=toolset())


async def test_stream_options_refused_by_name_are_dropped_for_good() -> None:
    recorder = Recorder(
        error(400, "Unrecognized request argument supplied: stream_options"),
        streamed(RECORDED_TEXT_NO_USAGE),
        streamed(RECORDED_TEXT_NO_USAGE),
    )
    client = make_client(recorder)
    response = await client.complete(simple_request(), Collect())
    assert response.text == "Hello there."
    assert response.usage.estimated
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens == round(len("Hello there.") / 3.5)
    await client.complete(simple_request(), Collect())
    await client.aclose()
    assert ["stream_options" in body for body in recorder.bodies] == [True, False, False]
    assert client.stream_usage is False


async def test_422_naming_include_usage_is_retried_without_it() -> None:
    recorder = Recorder(
        httpx.Response(422, json={"detail": "extra field not permitted: include_usage"}),
        streamed(RECORDED_TEXT_NO_USAGE),
    )
    client = make_client(recorder)
    await client.complete(simple_request(), Collect())
    await client.aclose()
    assert ["stream_options" in body for body in recorder.bodies] == [True, False]


async def test_any_400_to_the_first_request_is_retried_once_without_stream_options() -> None:
    recorder = Recorder(
        error(400, "Invalid request"), streamed(sse({"content": "hi"})), streamed(sse())
    )
    client = make_client(recorder)
    await client.complete(simple_request(), Collect())
    await client.complete(simple_request(), Collect())
    await client.aclose()
    assert ["stream_options" in body for body in recorder.bodies] == [True, False, False]


async def test_a_400_that_is_not_about_stream_options_is_reported() -> None:
    recorder = Recorder(
        error(400, "maximum context length is 4096"),
        error(400, "maximum context length is 4096"),
        streamed(sse({"content": "hi"}, usage=True)),
        error(400, "maximum context length is 4096"),
    )
    client = make_client(recorder)
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    assert caught.value.status == 400
    assert not caught.value.retryable
    assert "maximum context length" in caught.value.message
    # Not learned from a failure: the next request still asks for usage, and once it has
    # worked with it, a 400 is just reported.
    assert client.stream_usage is None
    await client.complete(simple_request(), Collect())
    assert client.stream_usage is True
    with pytest.raises(ModelHTTPError):
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert ["stream_options" in body for body in recorder.bodies] == [True, False, True, True]


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
async def test_busy_statuses_are_retryable(status: int) -> None:
    client = make_client(Recorder(error(status, "busy")))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (caught.value.status, caught.value.retryable) == (status, True)
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("status", "fix"),
    [(401, "TETHER_API_KEY"), (403, "TETHER_API_KEY"), (404, "TETHER_MODEL"), (413, "HTTP 413")],
)
async def test_client_errors_are_final_and_say_what_to_fix(status: int, fix: str) -> None:
    client = make_client(Recorder(error(status, "nope")))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert fix in caught.value.message
    assert "nope" in caught.value.message


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "Retry-After": "1"}, 0.25),
        ({"Retry-After": "<a date 30 s from now>"}, 30.0),
        ({"Retry-After": "soon"}, None),
    ],
)
async def test_retry_after_is_read_as_seconds_or_a_date(
    headers: dict[str, str], expected: float | None
) -> None:
    if headers.get("Retry-After") == "<a date 30 s from now>":
        headers = {"Retry-After": formatdate(time.time() + 30, usegmt=True)}
    client = make_client(Recorder(error(429, "slow down", headers)))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    if expected is None:
        assert caught.value.retry_after is None
    else:
        assert caught.value.retry_after == pytest.approx(expected, abs=2)


async def test_connection_refused_is_unreachable_and_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    client = make_client(Recorder(refuse))
    with pytest.raises(ModelUnreachable) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert caught.value.retryable
    assert "TETHER_BASE_URL" in caught.value.message


async def test_a_stream_that_breaks_off_is_retryable() -> None:
    body = RECORDED_REASONING_AND_TWO_CALLS[:900]
    failing = ModelProtocolError  # what the loop sees, either way
    for reply in (
        streamed(body, fail=httpx.ReadError("connection reset")),
        streamed(body),  # ends cleanly but without a finish reason
    ):
        client = make_client(Recorder(reply))
        with pytest.raises(failing) as caught:
            await client.complete(simple_request(), Collect())
        await client.aclose()
        assert caught.value.retryable


async def test_an_error_sent_mid_stream_is_reported() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n' + (
        b'data: {"error":{"code":502,"message":"Provider returned error"},'
        b'"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}\n\n'
    )
    client = make_client(Recorder(streamed(body)))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (caught.value.status, caught.value.retryable) == (502, True)
    assert "Provider returned error" in caught.value.message


# --- the text tool-call fallback ------------------------------------------------------------

TEXT_REPLY = (
    "Let me read the README.\n"
    '<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>\n'
    '<tool_call>{"name": "list_dir", "arguments": {"path": "src"}}</tool_call>'
)


def text_stream(text: str, size: int = 6) -> bytes:
    return sse(*({"content": text[i : i + size]} for i in range(0, len(text), size)))


async def test_text_mode_sends_no_tools_and_reads_calls_from_the_reply() -> None:
    recorder = Recorder(streamed(text_stream(TEXT_REPLY)))
    client = make_client(recorder, tool_mode="text")
    seen = Collect()
    messages = conversation()
    response = await client.complete(ModelRequest(messages=messages, tools=toolset()), seen)
    await client.aclose()

    assert response.text == "Let me read the README."
    assert "".join(seen.text) == response.text
    assert not any("<" in delta for delta in seen.text)
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("read_file", {"path": "README.md"}),
        ("list_dir", {"path": "src"}),
    ]
    assert len({c.id for c in response.tool_calls}) == 2
    assert response.finish_reason == "tool_calls"

    (body,) = recorder.bodies
    assert "tools" not in body
    system, *rest = body["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("You are terse.\n\n# Tools\n")
    assert "### read_file\n\nRead a file.\n\nParameters: " + SCHEMA.decode() in system["content"]
    assert "### list_dir" in system["content"]
    assert rest == [
        {"role": "user", "content": "What is here?"},
        {
            "role": "assistant",
            "content": (
                "Looking.\n\n"
                '<tool_call>{"name":"read_file","arguments":{"path": "README.md"}}</tool_call>\n'
                '<tool_call>{"name":"list_dir","arguments":{"path": "."}}</tool_call>'
            ),
        },
        {
            "role": "user",
            "content": (
                '<tool_result name="read_file" id="c1">\n# Demo\n</tool_result>\n\n'
                '<tool_result name="list_dir" id="c2">\nREADME.md\nsrc/\n</tool_result>\n\n'
                "And src?"
            ),
        },
    ]
    assert {"openai-text"} <= set(messages[3].cache)
    assert "openai" not in messages[3].cache


@pytest.mark.parametrize(
    "refusal",
    [
        "registry.ollama.ai/library/gemma3:1b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    ],
)
async def test_auto_mode_switches_to_text_when_the_server_refuses_tools(refusal: str) -> None:
    recorder = Recorder(
        error(400, refusal),
        streamed(text_stream(TEXT_REPLY)),
        streamed(text_stream("All done.")),
    )
    client = make_client(recorder)
    assert client.tool_mode == "auto"
    first = await client.complete(simple_request(), Collect())
    assert [c.name for c in first.tool_calls] == ["read_file", "list_dir"]
    second = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (second.text, second.tool_calls, second.finish_reason) == ("All done.", [], "stop")
    assert client.text_tools
    assert ["tools" in body for body in recorder.bodies] == [True, False, False]
    # The refusal was not taken for a refusal of stream_options.
    assert all("stream_options" in body for body in recorder.bodies)


@pytest.mark.parametrize(
    ("status", "refusal"),
    [
        (400, "registry.ollama.ai/library/gemma3:1b does not support tools"),
        (500, "tools param requires --jinja flag"),  # llama.cpp: not worth retrying
    ],
)
async def test_native_mode_reports_a_refusal_of_tools_with_the_fix(
    status: int, refusal: str
) -> None:
    recorder = Recorder(error(status, refusal))
    client = make_client(recorder, tool_mode="native")
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert 'tool_mode = "text"' in caught.value.message
    assert len(recorder.bodies) == 1


async def test_list_models_reads_ids_with_a_short_timeout() -> None:
    listing = {"object": "list", "data": [{"id": "qwen3"}, {"id": "gemma3"}]}
    recorder = Recorder(httpx.Response(200, json=listing), error(401, "bad key"))
    client = make_client(recorder)
    assert await client.list_models() == ["gemma3", "qwen3"]
    with pytest.raises(ModelHTTPError) as caught:
        await client.list_models()
    await client.aclose()
    request = recorder.requests[0]
    assert (request.method, str(request.url)) == ("GET", f"{BASE}/models")
    assert request.extensions["timeout"]["read"] == 5.0
    assert "TETHER_API_KEY" in caught.value.message


async def test_lines_end_only_at_cr_or_lf_and_a_torn_last_line_is_dropped() -> None:
    body = (
        'data: {"choices":[{"index":0,"delta":{"content":"a\u2028b"}}]}\r\n\r\n'
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\r\n\r\n'
        'data: {"choices":[],"usage":{"prompt_tokens":3,"compl'
    ).encode()
    client = make_client(Recorder(streamed(body, size=5)))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (response.text, response.finish_reason) == ("a\u2028b", "stop")
    assert response.usage.estimated


# --- answers that are not a usable stream ---------------------------------------------------

BAD_LINE = b'data: {"choices": [{"delta": {"content": "lost\n\n'


async def test_one_undecodable_line_in_a_finished_stream_is_skipped_with_a_warning() -> None:
    good = sse({"content": "Hello"}, {"content": " there."})
    first, rest = good.split(b"\n\n", 1)
    client = make_client(Recorder(streamed(first + b"\n\n" + BAD_LINE + rest)))
    collect = Collect()
    response = await client.complete(simple_request(), collect)
    await client.aclose()
    assert (response.text, response.finish_reason) == ("Hello there.", "stop")
    assert "".join(collect.text) == "Hello there."
    (warning,) = response.warnings
    assert "1 line that is not chat-completions JSON" in warning
    assert repr('{"choices": [{"delta": {"content": "lost') in warning


async def test_undecodable_lines_in_a_stream_that_does_not_finish_are_final() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n' + BAD_LINE * 2
    client = make_client(Recorder(streamed(body)))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert "2 lines that are not chat-completions JSON" in caught.value.message
    assert "ended before" not in caught.value.message


async def test_a_stream_of_nothing_but_undecodable_lines_is_final_even_when_done() -> None:
    client = make_client(Recorder(streamed(b"data: <html>\n\ndata: [DONE]\n\n")))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert "'<html>'" in caught.value.message


async def test_a_reply_left_empty_by_skipped_lines_is_a_retryable_failure() -> None:
    """The stream finishes ([DONE], a finish reason, usage), but every line that carried the
    answer was undecodable: an empty answer is no answer, and is asked for again."""
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    body = BAD_LINE * 3 + finish + b"data: [DONE]\n\n"
    client = make_client(Recorder(streamed(body)))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert caught.value.retryable
    assert "3 lines that are not chat-completions JSON" in caught.value.message
    assert "no answer" in caught.value.message


HTML_PAGE = "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>" + "<p>x</p>" * 100


@pytest.mark.parametrize(
    ("content_type", "body", "shown"),
    [
        ("text/html; charset=utf-8", HTML_PAGE, "'<!DOCTYPE html>\\n<html><head><title>Sign in"),
        ("application/json", '{"error": {"message": "quota exceeded"}}', "'quota exceeded'"),
        ("text/plain", "", "an empty body"),
    ],
)
async def test_a_200_answer_that_is_not_an_event_stream_is_final_and_quoted(
    content_type: str, body: str, shown: str
) -> None:
    reply = httpx.Response(200, headers={"content-type": content_type}, content=body.encode())
    client = make_client(Recorder(reply))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    message = caught.value.message
    assert not caught.value.retryable
    assert f"HTTP 200 with {content_type}, not an event stream" in message
    assert shown in message
    assert "TETHER_BASE_URL" in message
    assert len(message) < 600  # the page is quoted, not pasted


async def test_an_event_stream_type_over_a_page_is_final_and_quoted() -> None:
    client = make_client(Recorder(streamed(HTML_PAGE.encode())))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert "not an event stream: '<!DOCTYPE html>\\n<html>" in caught.value.message


async def test_a_stream_that_ends_early_says_what_arrived() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    client = make_client(Recorder(streamed(body)))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert caught.value.retryable
    assert "ended before the model finished (1 data lines arrived" in caught.value.message


async def test_empty_data_lines_are_ignored() -> None:
    client = make_client(Recorder(streamed(b"data:\n\ndata: \n\n" + sse({"content": "ok"}))))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (response.text, response.warnings) == ("ok", [])


async def test_silence_is_a_timeout_naming_how_long() -> None:
    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = make_client(Recorder(silent), silence_timeout=42.0)
    with pytest.raises(ModelTimeout) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert caught.value.retryable
    assert caught.value.code == "model_timeout"
    assert "nothing arrived for 42 s" in caught.value.message
