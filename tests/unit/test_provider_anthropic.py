"""The Anthropic Messages client through httpx's real stack, against recorded streams replayed
by `httpx.MockTransport`. A recorder checks every request it sends, with the same rules the
scripted model server enforces (one conformance check for the fake and the client)."""

# ruff: noqa: E501  (recorded streams keep their real, long lines)

import json
from typing import Any

import httpx
import pytest

from tests.replay import SCHEMA, Collect, Reply, streamed, toolset
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import (
    Message,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelTimeout,
    ModelUnreachable,
    ToolCallRequest,
)
from tether.testing import anthropic_request_problem

ROOT = "https://api.anthropic.test"

# A recorded stream (ids shortened): thinking, text, then two tool_use blocks whose input
# arrives as input_json_delta fragments (the first one empty, as the API sends it), usage
# split between message_start (with a cache read) and message_delta.
RECORDED_THINKING_TEXT_TWO_TOOLS = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFD","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"output_tokens":3,"service_tier":"standard"}}}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants the README"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" and the src listing."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I'll read both"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" at once."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x","name":"read_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"path\\": \\"READ"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ME.md\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_01T2y","name":"list_dir","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\\"pa"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"th\\": \\"src\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

RECORDED_MAX_TOKENS = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Here is the first part of a long"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":16}}

event: message_stop
data: {"type":"message_stop"}

"""

RECORDED_OVERLOADED = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Sta"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

"""


def events(*items: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (item["type"].encode(), json.dumps(item).encode())
        for item in items
    )


def text_reply(text: str, stop: str = "end_turn") -> bytes:
    return events(
        {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
            for t in [text[i : i + 5] for i in range(0, len(text), 5)]
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    )


def api_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return httpx.Response(status, json=body, headers=headers)


class Recorder:
    """Answers with the given replies in order; checks each request's headers and body."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert request.headers["anthropic-version"] == "2023-06-01"
        if request.method == "POST":
            assert request.headers["content-type"] == "application/json"
            body = json.loads(request.content)
            assert body["stream"] is True
            assert anthropic_request_problem(body) is None, anthropic_request_problem(body)
            if "tools" not in body:
                assert "tool_use" not in request.content.decode()
            self.bodies.append(body)
        reply = self.replies.pop(0)
        return reply if isinstance(reply, httpx.Response) else reply(request)


def conversation() -> list[Message]:
    return [
        Message(role="system", content="You are terse."),
        Message(role="user", content="What is here?"),
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=[
                ToolCallRequest(id="toolu_1", name="read_file", arguments='{"path": "README.md"}'),
                ToolCallRequest(id="functions.list_dir:1", name="list_dir", arguments="{oops"),
            ],
        ),
        Message(role="tool", content="# Demo", tool_call_id="toolu_1", tool_name="read_file"),
        Message(
            role="tool",
            content="[invalid JSON]",
            tool_call_id="functions.list_dir:1",
            tool_name="list_dir",
        ),
        Message(role="user", content="And src?"),
    ]


def make_client(recorder: Recorder, base_url: str = ROOT, **kw: Any) -> AnthropicMessagesClient:
    return AnthropicMessagesClient(
        base_url=base_url,
        model="claude-sonnet-4-5",
        api_key="sk-ant-test",
        transport=httpx.MockTransport(recorder),
        **kw,
    )


def simple_request() -> ModelRequest:
    return ModelRequest(messages=conversation()[:2], tools=toolset())


async def test_recorded_stream_assembles_thinking_text_and_two_tool_uses() -> None:
    recorder = Recorder(streamed(RECORDED_THINKING_TEXT_TWO_TOOLS))
    client = make_client(recorder)
    seen = Collect()
    response = await client.complete(simple_request(), seen)
    await client.aclose()
    assert response.text == "I'll read both at once."
    assert response.reasoning == "The user wants the README and the src listing."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("toolu_01T1x", "read_file", {"path": "README.md"}),
        ("toolu_01T2y", "list_dir", {"path": "src"}),
    ]
    assert response.finish_reason == "tool_calls"
    # Input counts the cached prefix too.
    assert (response.usage.input_tokens, response.usage.output_tokens) == (472 + 1800, 89)
    assert not response.usage.estimated
    assert seen.text == ["I'll read both", " at once."]
    assert seen.reasoning == ["The user wants the README", " and the src listing."]
    (request,) = recorder.requests
    assert str(request.url) == f"{ROOT}/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert "authorization" not in request.headers


async def test_stop_reason_max_tokens_is_the_output_limit() -> None:
    client = make_client(Recorder(streamed(RECORDED_MAX_TOKENS)))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert response.finish_reason == "length"
    assert response.text == "Here is the first part of a long"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (25, 16)


async def test_request_body_alternates_and_merges_tool_results() -> None:
    recorder = Recorder(streamed(text_reply("ok")))
    client = make_client(recorder, max_output_tokens=1234)
    messages = conversation()
    await client.complete(ModelRequest(messages=messages, tools=toolset()), Collect())
    await client.aclose()
    ephemeral = {"type": "ephemeral"}
    assert recorder.bodies == [
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1234,
            "stream": True,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral}],
            "tools": [
                {
                    "name": "read_file",
                    "description": "Read a file.",
                    "input_schema": json.loads(SCHEMA),
                },
                {
                    "name": "list_dir",
                    "description": "List a folder.",
                    "input_schema": json.loads(SCHEMA),
                },
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is here?"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Looking."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "read_file",
                            "input": {"path": "README.md"},
                        },
                        {
                            "type": "text",
                            "text": "[the arguments of call functions.list_dir:1 were not a"
                            " JSON object: {oops]",
                        },
                        {
                            "type": "tool_use",
                            "id": "functions_list_dir_1",
                            "name": "list_dir",
                            "input": {},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "# Demo"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "functions_list_dir_1",
                            "content": "[invalid JSON]",
                        },
                        {"type": "text", "text": "And src?", "cache_control": ephemeral},
                    ],
                },
            ],
        }
    ]


async def test_encodings_are_cached_and_the_cache_breakpoint_moves() -> None:
    recorder = Recorder(streamed(text_reply("one")), streamed(text_reply("two")))
    client = make_client(recorder)
    messages = conversation()[:2]
    await client.complete(ModelRequest(messages=messages, tools=toolset()), Collect())
    cached = messages[1].cache["anthropic"]
    messages.append(Message(role="assistant", content="one"))
    messages.append(Message(role="user", content="more"))
    await client.complete(ModelRequest(messages=messages, tools=toolset()), Collect())
    await client.aclose()
    assert messages[1].cache["anthropic"] is cached
    first, second = (body["messages"] for body in recorder.bodies)
    assert first[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in second[0]["content"][-1]
    assert second[-1]["content"] == [
        {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}
    ]


async def test_empty_messages_are_left_out_and_neighbours_merged() -> None:
    recorder = Recorder(streamed(text_reply("ok")))
    client = make_client(recorder)
    messages = [
        Message(role="system", content=""),
        Message(role="user", content="first"),
        Message(role="assistant", content="  "),
        Message(role="user", content="second"),
    ]
    await client.complete(ModelRequest(messages=messages), Collect())
    await client.aclose()
    (body,) = recorder.bodies
    assert "system" not in body
    assert "tools" not in body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]


@pytest.mark.parametrize(
    "base_url",
    ["https://api.anthropic.test", "https://api.anthropic.test/", "https://api.anthropic.test/v1"],
)
async def test_base_url_with_or_without_v1(base_url: str) -> None:
    recorder = Recorder(streamed(text_reply("ok")), httpx.Response(200, json={"data": []}))
    client = make_client(recorder, base_url=base_url)
    await client.complete(simple_request(), Collect())
    await client.list_models()
    await client.aclose()
    assert [str(r.url) for r in recorder.requests] == [
        f"{ROOT}/v1/messages",
        f"{ROOT}/v1/models?limit=1000",
    ]


async def test_list_models_reads_ids_with_a_short_timeout() -> None:
    listing = {
        "data": [
            {"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5"},
            {"type": "model", "id": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5"},
        ],
        "has_more": False,
        "first_id": "claude-sonnet-4-5",
        "last_id": "claude-haiku-4-5",
    }
    recorder = Recorder(httpx.Response(200, json=listing))
    client = make_client(recorder)
    assert await client.list_models() == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    await client.aclose()
    (request,) = recorder.requests
    assert request.method == "GET"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.extensions["timeout"]["read"] == 5.0


async def test_an_overloaded_error_event_is_retryable() -> None:
    client = make_client(Recorder(streamed(RECORDED_OVERLOADED)))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (caught.value.status, caught.value.retryable) == (529, True)
    assert "overloaded_error" in caught.value.message


async def test_an_invalid_request_error_event_is_final() -> None:
    body = events(
        {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
        {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
    )
    client = make_client(Recorder(streamed(body)))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (caught.value.status, caught.value.retryable) == (400, False)


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (429, "rate_limit_error", True),
        (500, "api_error", True),
        (529, "overloaded_error", True),
        (400, "invalid_request_error", False),
        (413, "request_too_large", False),
    ],
)
async def test_http_errors(status: int, kind: str, retryable: bool) -> None:
    reply = api_error(status, kind, "details here", {"retry-after": "12"})
    client = make_client(Recorder(reply))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (caught.value.status, caught.value.retryable) == (status, retryable)
    assert caught.value.retry_after == 12.0
    assert "details here" in caught.value.message


@pytest.mark.parametrize(
    ("status", "kind", "fix"),
    [
        (401, "authentication_error", "ANTHROPIC_API_KEY"),
        (403, "permission_error", "ANTHROPIC_API_KEY"),
        (404, "not_found_error", "TETHER_MODEL"),
    ],
)
async def test_errors_that_need_a_fix_say_which(status: int, kind: str, fix: str) -> None:
    client = make_client(Recorder(api_error(status, kind, "nope")))
    with pytest.raises(ModelHTTPError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert fix in caught.value.message


async def test_connection_failures_and_broken_streams_are_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    client = make_client(Recorder(refuse))
    with pytest.raises(ModelUnreachable) as unreachable:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert unreachable.value.retryable
    assert "TETHER_BASE_URL" in unreachable.value.message

    cut = RECORDED_THINKING_TEXT_TWO_TOOLS[:1500]
    for reply in (streamed(cut, fail=httpx.RemoteProtocolError("peer closed")), streamed(cut)):
        client = make_client(Recorder(reply))
        with pytest.raises(ModelProtocolError) as broken:
            await client.complete(simple_request(), Collect())
        await client.aclose()
        assert broken.value.retryable


async def test_missing_usage_is_estimated() -> None:
    body = events(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    )
    client = make_client(Recorder(streamed(body)))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert response.text == "hi"
    assert response.usage.estimated
    assert response.usage.input_tokens > 0


async def test_tool_input_given_whole_in_the_start_event_is_used() -> None:
    body = events(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": 1}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    )
    client = make_client(Recorder(streamed(body)))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("t1", "grep", '{"q": 1}')
    ]


async def test_auto_mode_falls_back_to_text_tools_when_refused() -> None:
    reply = (
        'Reading.\n<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>'
    )
    recorder = Recorder(
        api_error(400, "invalid_request_error", "llama3 does not support tools"),
        streamed(text_reply(reply)),
    )
    client = make_client(recorder)
    seen = Collect()
    messages = conversation()
    response = await client.complete(ModelRequest(messages=messages, tools=toolset()), seen)
    await client.aclose()
    assert client.text_tools
    assert response.text == "Reading."
    assert "".join(seen.text) == "Reading."
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("read_file", '{"path":"README.md"}')
    ]
    assert response.finish_reason == "tool_calls"
    refused, retried = recorder.bodies
    assert "tools" in refused
    assert "tools" not in retried
    assert retried["system"][0]["text"].startswith("You are terse.\n\n# Tools\n")
    assert [m["role"] for m in retried["messages"]] == ["user", "assistant", "user"]
    assert retried["messages"][1]["content"][0]["text"].startswith(
        'Looking.\n\n<tool_call>{"name":"read_file","arguments":{"path": "README.md"}}'
    )
    results = [block["text"] for block in retried["messages"][2]["content"]]
    assert results[0] == '<tool_result name="read_file" id="toolu_1">\n# Demo\n</tool_result>'
    assert results[-1] == "And src?"
    assert "anthropic-text" in messages[3].cache


# --- answers that are not a usable stream ---------------------------------------------------

BAD_EVENT = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,\n\n'


async def test_one_undecodable_event_in_a_finished_stream_is_skipped_with_a_warning() -> None:
    good = text_reply("Hello there.")
    head, rest = good.split(b"\n\n", 1)
    client = make_client(Recorder(streamed(head + b"\n\n" + BAD_EVENT + rest)))
    response = await client.complete(simple_request(), Collect())
    await client.aclose()
    assert (response.text, response.finish_reason) == ("Hello there.", "stop")
    (warning,) = response.warnings
    assert "1 line that is not Messages JSON" in warning
    assert '\'{"type": "content_block_delta", "index": 0,\'' in warning


async def test_undecodable_events_in_a_stream_that_does_not_finish_are_final() -> None:
    cut = text_reply("Hello there.").split(b"event: message_delta")[0]
    client = make_client(Recorder(streamed(cut + BAD_EVENT)))
    with pytest.raises(ModelProtocolError) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert not caught.value.retryable
    assert "1 line that is not Messages JSON" in caught.value.message


@pytest.mark.parametrize(
    ("content_type", "body", "shown"),
    [
        ("text/html", "<html><body>Bad gateway</body></html>", "'<html><body>Bad gateway"),
        (
            "application/json",
            '{"type": "error", "error": {"type": "api_error", "message": "proxy says no"}}',
            "'proxy says no'",
        ),
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
    assert not caught.value.retryable
    assert f"HTTP 200 with {content_type}, not an event stream" in caught.value.message
    assert shown in caught.value.message
    assert "https://api.anthropic.com" in caught.value.message


async def test_silence_is_a_timeout_naming_how_long() -> None:
    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = make_client(Recorder(silent), silence_timeout=7.5)
    with pytest.raises(ModelTimeout) as caught:
        await client.complete(simple_request(), Collect())
    await client.aclose()
    assert caught.value.retryable
    assert "nothing arrived for 7.5 s" in caught.value.message
