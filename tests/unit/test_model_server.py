"""The scripted fake model server, exercised over real HTTP on 127.0.0.1."""

import http.client
import json
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port, wait_until
from tether.testing import (
    ModelServer,
    Script,
    ScriptError,
    load_script,
    parse_script,
)
from tether.testing.handler import peer_closed

USER = [{"role": "user", "content": "hello model"}]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as http:
        yield http


def stream(
    client: httpx.Client, server: ModelServer, **extra: Any
) -> tuple[list[dict[str, Any]], bool]:
    """POST a streaming request; return the decoded chunks and whether [DONE] arrived."""
    body = {"model": "m", "messages": USER, "stream": True, **extra}
    chunks: list[dict[str, Any]] = []
    done = False
    with client.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["cache-control"] == "no-cache"
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
            else:
                assert not done, "data after [DONE]"
                chunks.append(json.loads(data))
    return chunks, done


def choice_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0] for c in chunks if c["choices"]]


def reassemble(chunks: list[dict[str, Any]]) -> tuple[str, dict[int, dict[str, str]], str | None]:
    """Fold deltas the way a client does: content text, tool calls by index, finish reason."""
    text = ""
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    for choice in choice_chunks(chunks):
        delta = choice["delta"]
        text += delta.get("content") or ""
        for call in delta.get("tool_calls", []):
            slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
            if "id" in call:
                assert call["type"] == "function"
                slot["id"] = call["id"]
                slot["name"] = call["function"]["name"]
            slot["arguments"] += call["function"].get("arguments", "")
        if choice["finish_reason"] is not None:
            assert finish is None, "finish_reason sent twice"
            finish = choice["finish_reason"]
    return text, calls, finish


def test_streamed_text_reassembles(client: httpx.Client) -> None:
    text = "Hello there, this is a scripted reply."
    with ModelServer({"model": "fake-1", "steps": [{"text": text, "chunks": 3}]}) as server:
        chunks, done = stream(client, server)
    assert done
    choices = choice_chunks(chunks)
    assert choices[0]["delta"]["role"] == "assistant"
    assert [c["delta"].get("content") for c in choices[:3]] == [text[:13], text[13:26], text[26:]]
    assert reassemble(chunks) == (text, {}, "stop")
    assert choices[-1] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert all(c["finish_reason"] is None for c in choices[:-1])
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"] == "chatcmpl-0"
        assert chunk["model"] == "fake-1"
        assert isinstance(chunk["created"], int)
        assert "usage" not in chunk


def test_default_chunking_is_about_twenty_characters(client: httpx.Client) -> None:
    text = "x" * 95
    with ModelServer({"steps": [{"text": text}]}) as server:
        chunks, _ = stream(client, server)
    pieces = [c["delta"]["content"] for c in choice_chunks(chunks) if "content" in c["delta"]]
    assert "".join(pieces) == text
    assert len(pieces) == 5


def test_tool_call_deltas_reassemble(client: httpx.Client) -> None:
    script = {
        "steps": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md", "n": 2}}]},
            {
                "text": "preface",
                "tool_calls": [
                    {"name": "list_dir", "arguments": {"path": "."}, "id": "call_x"},
                    {"name": "read_file", "arguments_raw": "{not json"},
                ],
            },
        ]
    }
    with ModelServer(script) as server:
        first, done_first = stream(client, server)
        second, done_second = stream(client, server)
    assert done_first
    assert done_second

    first_choices = choice_chunks(first)
    assert first_choices[0]["delta"]["role"] == "assistant"
    header = first_choices[0]["delta"]["tool_calls"][0]
    assert header == {
        "index": 0,
        "id": "call_0_0",
        "type": "function",
        "function": {"name": "read_file", "arguments": ""},
    }
    argument_deltas = [c for c in first_choices[1:] if c["delta"].get("tool_calls")]
    assert len(argument_deltas) == 2
    assert reassemble(first) == (
        "",
        {0: {"id": "call_0_0", "name": "read_file", "arguments": '{"path":"README.md","n":2}'}},
        "tool_calls",
    )

    text, calls, finish = reassemble(second)
    assert text == "preface"
    assert calls == {
        0: {"id": "call_x", "name": "list_dir", "arguments": '{"path":"."}'},
        1: {"id": "call_1_1", "name": "read_file", "arguments": "{not json"},
    }
    assert finish == "tool_calls"
    # The text comes before the tool calls.
    kinds = ["content" if "content" in c["delta"] else "tool" for c in choice_chunks(second)[:-1]]
    assert kinds == sorted(kinds)


def test_finish_reason_override(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "cut off", "finish_reason": "length"}]}) as server:
        chunks, _ = stream(client, server)
    assert reassemble(chunks) == ("cut off", {}, "length")


def test_usage_chunk_only_when_asked(client: httpx.Client) -> None:
    steps = [
        {"text": "abcdefgh"},
        {"text": "abcdefgh"},
        {"text": "x", "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
    ]
    with ModelServer({"steps": steps}) as server:
        plain, _ = stream(client, server)
        estimated, done = stream(client, server, stream_options={"include_usage": True})
        scripted, _ = stream(client, server, stream_options={"include_usage": True})
    assert all("usage" not in chunk and chunk["choices"] for chunk in plain)

    assert done
    last = estimated[-1]
    assert last["choices"] == []
    # "hello model" is 11 characters -> 3 tokens; "abcdefgh" is 8 -> 2.
    assert last["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert all("usage" not in chunk for chunk in estimated[:-1])
    assert estimated[-2]["choices"][0]["finish_reason"] == "stop"

    assert scripted[-1]["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }


def test_non_streaming_response(client: httpx.Client) -> None:
    steps = [
        {"text": "plain answer"},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
    ]
    with ModelServer({"model": "fake-2", "steps": steps}) as server:
        url = f"{server.base_url}/chat/completions"
        first = client.post(url, json={"messages": USER})
        second = client.post(url, json={"messages": USER, "stream": False})
    assert first.status_code == 200
    assert first.headers["content-type"] == "application/json"
    assert int(first.headers["content-length"]) == len(first.content)
    body = first.json()
    assert body["object"] == "chat.completion"
    assert body["id"] == "chatcmpl-0"
    assert body["model"] == "fake-2"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "plain answer"},
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}

    choice = second.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
            }
        ],
    }


def test_error_step_then_next_step(client: httpx.Client) -> None:
    steps = [
        {"error": {"status": 429, "retry_after": "2", "message": "slow down"}},
        {"error": {"status": 503}},
        {"text": "recovered"},
    ]
    with ModelServer({"steps": steps}) as server:
        url = f"{server.base_url}/chat/completions"
        limited = client.post(url, json={"messages": USER, "stream": True})
        unavailable = client.post(url, json={"messages": USER})
        chunks, done = stream(client, server)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert limited.json() == {"error": {"message": "slow down", "type": "rate_limit_error"}}
    assert unavailable.status_code == 503
    assert "retry-after" not in unavailable.headers
    assert unavailable.json()["error"]["type"] == "server_error"
    assert done
    assert reassemble(chunks)[0] == "recovered"


def test_drop_after_chunks_truncates_the_stream(client: httpx.Client) -> None:
    steps = [{"text": "partial answer here", "chunks": 3, "drop_after_chunks": 2}, {"text": "ok"}]
    with ModelServer({"steps": steps}) as server:
        lines: list[str] = []
        body = {"messages": USER, "stream": True}
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", f"{server.base_url}/chat/completions", json=body) as response,
        ):
            lines.extend(line for line in response.iter_lines() if line)
        # The client can carry on with a fresh connection.
        chunks, done = stream(client, server)
    assert len(lines) == 2
    assert "data: [DONE]" not in lines
    assert json.loads(lines[1].removeprefix("data: "))["choices"][0]["finish_reason"] is None
    assert done
    assert reassemble(chunks)[0] == "ok"


def _read_events_until(sock: socket.socket, received: bytearray, count: int) -> None:
    """Read the raw response until it holds `count` SSE events."""
    while received.count(b"data: ") < count:
        chunk = sock.recv(65536)
        assert chunk, f"the stream ended with {received.count(b'data: ')} events"
        received += chunk


def streamed_request() -> bytes:
    """A streamed chat completions request as raw HTTP/1.1, for tests that hold the socket."""
    body = json.dumps({"messages": USER, "stream": True}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def test_a_held_stream_waits_at_each_hold_for_a_release() -> None:
    step = {"text": "abcdef", "chunks": 3, "hold_at_chunks": [1, 2]}
    with ModelServer({"steps": [step]}) as server:
        request = streamed_request()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request)
            received = bytearray()
            _read_events_until(sock, received, 1)
            for events in (1, 2):
                sock.settimeout(0.2)
                with pytest.raises(TimeoutError):  # held: nothing more comes
                    received += sock.recv(65536)
                assert received.count(b"data: ") == events
                sock.settimeout(5)
                server.release()
                _read_events_until(sock, received, events + 1)
            while not received.endswith(b"0\r\n\r\n"):
                chunk = sock.recv(65536)
                assert chunk
                received += chunk
    assert b"data: [DONE]" in received


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Both ends of a TCP connection on 127.0.0.1: (the server's end, the client's)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname()[:2], timeout=5)
        served, _ = listener.accept()
    with served, client:
        yield served, client


def test_peer_closed_tells_a_closed_sender_from_a_quiet_or_talking_one(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    served, client = tcp_pair
    served.settimeout(30)  # a socket with a timeout is still only looked at, never waited on
    assert not peer_closed(served)
    client.sendall(b"GET /next HTTP/1.1\r\n")  # a next request: still listening
    assert not peer_closed(served)
    assert served.recv(64).startswith(b"GET /next")
    client.shutdown(socket.SHUT_WR)
    wait_until(lambda: peer_closed(served), "the closed end seen")


def test_a_request_given_up_on_before_it_was_read_takes_no_step(client: httpx.Client) -> None:
    """A request whose sender closed the connection while it waited to be read (a cancelled
    turn's, on a loaded machine) is set aside: the step it would have taken goes to the next
    request that is still listened for. Here it waits behind a held stream on one connection."""
    held = {"text": "abcdef", "chunks": 3, "hold_at_chunks": [1]}
    with ModelServer({"steps": [held, {"text": "for the next one"}]}) as server:
        request = streamed_request()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request)
            _read_events_until(sock, bytearray(), 1)  # the first is being answered, held
            sock.sendall(request)  # the second waits behind it
            sock.shutdown(socket.SHUT_WR)  # and its sender gives up on it
            server.release()
            wait_until(lambda: bool(server.abandoned), "the second request set aside")
        assert len(server.requests) == 1
        assert server.abandoned[0]["messages"] == USER
        reply = client.post(f"{server.base_url}/chat/completions", json={"messages": USER})
    assert reply.json()["choices"][0]["message"]["content"] == "for the next one"


def test_exhausted_script_answers_500(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "only"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        assert client.post(url, json={"messages": USER}).status_code == 200
        exhausted = client.post(url, json={"messages": USER})
    assert exhausted.status_code == 500
    assert exhausted.json() == {
        "error": {"message": "model script exhausted after 1 steps", "type": "server_error"}
    }


def test_loop_mode_cycles(client: httpx.Client) -> None:
    with ModelServer({"loop": True, "steps": [{"text": "a"}, {"text": "b"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        texts = [
            client.post(url, json={"messages": USER}).json()["choices"][0]["message"]["content"]
            for _ in range(5)
        ]
    assert texts == ["a", "b", "a", "b", "a"]


def _said(client: httpx.Client, server: ModelServer, first_user: str) -> str:
    body = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": first_user},
            {"role": "assistant", "content": "earlier"},
            {"role": "user", "content": "later message"},
        ]
    }
    reply = client.post(f"{server.base_url}/chat/completions", json=body)
    if reply.status_code != 200:
        return f"HTTP {reply.status_code}"
    return reply.json()["choices"][0]["message"]["content"]


def test_matched_steps_follow_each_conversation_whatever_order_requests_come_in(
    client: httpx.Client,
) -> None:
    steps = [
        {"match": "agent:", "text": "agent 1"},
        {"match": "sub-a:", "text": "a 1"},
        {"match": "sub-b:", "text": "b 1"},
        {"match": "sub-a:", "text": "a 2"},
        {"text": "anyone"},
        {"match": "agent:", "text": "agent 2"},
    ]
    with ModelServer({"steps": steps}) as server:
        said = [
            _said(client, server, first)
            for first in (
                "sub-b: go",
                "agent: go",
                "sub-a: go",
                "sub-b: go",
                "sub-a: go",
                "agent: go",
                "sub-a: go",
                "later message",
            )
        ]
        recorded = len(server.requests)
    # The match is looked for in the first user message only: "later message" is in every
    # request, and takes no matched step.
    assert said == ["b 1", "agent 1", "a 1", "anyone", "a 2", "agent 2", "HTTP 500", "HTTP 500"]
    assert recorded == 8


def test_matched_steps_in_anthropic_requests_and_in_loop_mode(client: httpx.Client) -> None:
    steps = [{"match": "one", "text": "first"}, {"match": "two", "text": "second"}]
    with ModelServer({"loop": True, "steps": steps}) as server:
        texts = []
        for first in ("two", "two", "one", "one"):
            body = {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "text", "text": first}]}],
            }
            reply = client.post(f"{server.base_url}/messages", json=body).json()
            texts.append(reply["content"][0]["text"])
    # In loop mode a round starts over once no step left in it matches.
    assert texts == ["second", "second", "first", "first"]


def test_requests_are_recorded_in_order(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "1"}, {"text": "2"}, {"text": "3"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        bodies = [{"messages": [{"role": "user", "content": f"message {i}"}]} for i in range(3)]
        for body in bodies:
            client.post(url, json=body)
        over_http = client.get(f"{server.url}/_tether/requests")
        recorded = server.requests
        recorded[0]["mutated"] = True  # a copy: must not leak back into the server
        assert server.requests == bodies
    assert over_http.status_code == 200
    assert over_http.json() == bodies


def test_request_headers_are_recorded_in_order(client: httpx.Client) -> None:
    steps = [{"text": "1"}, {"text": "2"}]
    with ModelServer({"steps": steps, "tool_support": "none"}) as server:
        client.post(
            f"{server.base_url}/chat/completions",
            json={"messages": USER, "tools": [{"type": "function"}]},  # refused, recorded
            headers={"Authorization": "Bearer sk-one"},
        )
        client.post(
            f"{server.url}/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": ANTHROPIC_USER},
            headers={"X-Api-Key": "sk-ant-two", "anthropic-version": "2023-06-01"},
        )
        over_http = client.get(f"{server.url}/_tether/headers").json()
        recorded = server.request_headers
        server.set_script({"steps": steps})
        assert server.request_headers == []
    assert over_http == recorded
    assert [h.get("authorization") for h in recorded] == ["Bearer sk-one", None]
    assert [h.get("x-api-key") for h in recorded] == [None, "sk-ant-two"]


def test_a_malformed_line_goes_inside_an_otherwise_complete_stream(
    client: httpx.Client,
) -> None:
    with ModelServer({"steps": [{"text": "abc", "chunks": 3, "malformed_after_chunks": 2}]}) as s:
        body = {"model": "m", "messages": USER, "stream": True}
        with client.stream("POST", f"{s.base_url}/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line]
    datas = [line.removeprefix("data: ") for line in lines]
    assert datas[-1] == "[DONE]"
    bad = [d for d in datas[:-1] if not _is_json(d)]
    assert bad == ['{"choices": [{"delta": {"content": "unfinished']
    assert datas.index(bad[0]) == 2
    good = [json.loads(d) for d in datas[:-1] if _is_json(d)]
    assert reassemble(good)[0] == "abc"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_page_step_answers_200_with_that_body(client: httpx.Client, path: str) -> None:
    steps = [
        {"page": {"body": "<html>Sign in</html>"}},
        {"page": {"body": "{}", "content_type": "application/json"}},
    ]
    body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
    with ModelServer({"steps": steps}) as server:
        first = client.post(f"{server.url}{path}", json=body)
        second = client.post(f"{server.url}{path}", json=body)
    assert (first.status_code, first.text) == (200, "<html>Sign in</html>")
    assert first.headers["content-type"] == "text/html; charset=utf-8"
    assert (second.status_code, second.headers["content-type"]) == (200, "application/json")


def test_concurrent_requests_each_take_one_step(client: httpx.Client) -> None:
    count = 8
    with ModelServer({"steps": [{"text": f"step {i}"} for i in range(count)]}) as server:
        url = f"{server.base_url}/chat/completions"
        texts: list[str] = []
        lock = threading.Lock()

        def ask() -> None:
            reply = client.post(url, json={"messages": USER}).json()
            with lock:
                texts.append(reply["choices"][0]["message"]["content"])

        threads = [threading.Thread(target=ask) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(texts) == sorted(f"step {i}" for i in range(count))


def test_delays(client: httpx.Client) -> None:
    step = {"text": "abc", "chunks": 3, "delay_ms": 40, "chunk_delay_ms": 20}
    with ModelServer({"steps": [step]}) as server:
        started = time.monotonic()
        chunks, done = stream(client, server)
        elapsed = time.monotonic() - started
    assert done
    assert reassemble(chunks)[0] == "abc"
    # 40 ms before the headers, then 20 ms between each of the 4 choice chunks.
    assert elapsed >= 0.1


def test_introspection_endpoints(client: httpx.Client) -> None:
    with ModelServer({"model": "first", "steps": [{"text": "old"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        client.post(url, json={"messages": USER})
        health = client.get(f"{server.url}/_tether/health")
        models = client.get(f"{server.base_url}/models")
        replaced = client.post(
            f"{server.url}/_tether/script", json={"model": "second", "steps": [{"text": "new"}]}
        )
        assert server.requests == []
        reply = client.post(url, json={"messages": USER}).json()
        rejected = client.post(f"{server.url}/_tether/script", json={"steps": [{"txt": "x"}]})
        renamed = client.get(f"{server.base_url}/models").json()
    assert health.json() == {"ok": True}
    assert models.json() == {
        "object": "list",
        "data": [{"id": "first", "object": "model", "owned_by": "tether"}],
    }
    assert replaced.status_code == 200
    assert reply["choices"][0]["message"]["content"] == "new"
    assert reply["model"] == "second"
    assert rejected.status_code == 400
    assert "step 0" in rejected.json()["error"]["message"]
    assert renamed["data"][0]["id"] == "second"


def test_set_script_resets(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "one"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        client.post(url, json={"messages": USER})
        server.set_script(Script.from_dict({"steps": [{"text": "two"}]}))
        assert server.requests == []
        reply = client.post(url, json={"messages": USER}).json()
    assert reply["choices"][0]["message"]["content"] == "two"


def test_bad_requests(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "fine"}]}) as server:
        url = f"{server.base_url}/chat/completions"
        missing = client.get(f"{server.url}/v2/nothing")
        missing_post = client.post(f"{server.base_url}/embeddings", json={})
        invalid = client.post(url, content=b"{not json", headers={"content-type": "x"})
        not_object = client.post(url, json=[1, 2])
        # Rejected requests do not consume a step, and the keep-alive connection still works.
        reply = client.post(url, json={"messages": USER})
        assert server.requests == [{"messages": USER}]
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no route for GET /v2/nothing"
    assert missing_post.status_code == 404
    assert invalid.status_code == 400
    assert invalid.json()["error"]["type"] == "invalid_request_error"
    assert not_object.status_code == 400
    assert reply.json()["choices"][0]["message"]["content"] == "fine"


INVALID_SCRIPTS: list[tuple[dict[str, Any], list[str]]] = [
    ({"steps": [{"text": "a"}, {"text": "b"}, {"txt": "c"}]}, ["step 2", "'txt'"]),
    ({"steps": [{"text": "a", "chunks": "3"}]}, ["step 0", "'chunks'", "integer"]),
    ({"steps": [{"text": 5}]}, ["step 0", "'text'", "string"]),
    ({"steps": [{}, {"text": "a"}]}, ["step 0", "'text'"]),
    (
        {"steps": [{"text": "a"}, {"tool_calls": [{"arguments": {}}]}]},
        ["step 1", "tool_calls[0]", "'name'"],
    ),
    (
        {"steps": [{"tool_calls": [{"name": "x", "args": {}}]}]},
        ["step 0", "tool_calls[0]", "'args'"],
    ),
    ({"steps": [{"error": {"status": 429}, "text": "a"}]}, ["step 0", "'text'", "'error'"]),
    ({"steps": [{"error": {"status": 200}}]}, ["step 0", "'status'"]),
    ({"steps": [{"text": "a", "delay_ms": True}]}, ["step 0", "'delay_ms'"]),
    ({"steps": [{"text": "a", "usage": {"prompt": 1}}]}, ["step 0", "'prompt'"]),
    ({"stpes": []}, ["'stpes'"]),
    ({"steps": {}}, ["'steps'", "list"]),
    ({"loop": "yes", "steps": []}, ["'loop'"]),
    ({"tool_support": "maybe", "steps": []}, ["'tool_support'", "native, none"]),
    ({"steps": [{"reasoning": 1}]}, ["step 0", "'reasoning'", "string"]),
    ({"steps": [{"page": {"body": "x"}, "text": "a"}]}, ["step 0", "'text'", "'page'"]),
    ({"steps": [{"page": {"content_type": "text/html"}}]}, ["step 0", "'page'", "'body'"]),
    ({"steps": [{"text": "a", "malformed_after_chunks": -1}]}, ["'malformed_after_chunks'"]),
    ({"steps": [{"text": "a", "match": ""}]}, ["step 0", "'match'", "empty"]),
    ({"steps": [{"text": "a", "match": 3}]}, ["step 0", "'match'", "string"]),
    ({"steps": [{"match": "x"}]}, ["step 0", "needs at least one"]),
    ({"steps": [{"text": "a", "hold_at_chunks": 1}]}, ["step 0", "'hold_at_chunks'", "list"]),
    ({"steps": [{"text": "a", "hold_at_chunks": [2, 1]}]}, ["'hold_at_chunks'", "ascending"]),
]


@pytest.mark.parametrize(("script", "fragments"), INVALID_SCRIPTS)
def test_invalid_scripts_are_rejected(script: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ValueError, match="script") as caught:
        parse_script(script)
    assert isinstance(caught.value, ScriptError)
    for fragment in fragments:
        assert fragment in str(caught.value)
    with pytest.raises(ValueError, match="script"):
        ModelServer(script)


def test_load_script(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"model": "m", "loop": True, "steps": [{"text": "hi"}]}))
    script = load_script(str(good))
    assert script.model == "m"
    assert script.loop
    assert script.steps[0].text == "hi"

    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_script(str(bad_json))

    bad_shape = tmp_path / "shape.json"
    bad_shape.write_text(json.dumps({"steps": [{"text": "a"}, {"chunks": 2}]}))
    with pytest.raises(ValueError, match=r"shape\.json: script step 1"):
        load_script(str(bad_shape))


def _read_line(stream: Any, timeout: float) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError("no output from the model server within the timeout")
    return stream.readline()


@contextmanager
def _serving(command: list[str]) -> Generator[tuple[subprocess.Popen[str], str]]:
    """Start a model server process; yield it and the first line it prints (killed if the
    test leaves it running)."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            yield process, _read_line(process.stdout, timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_cli_serves_until_sigterm(tmp_path: Path, client: httpx.Client) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "from the cli"}]}))
    port_file = tmp_path / "port"
    command = [
        sys.executable,
        "-P",
        "-m",
        "tether.testing",
        "--script",
        str(script),
        "--port-file",
        str(port_file),
    ]
    with _serving(command) as (process, line):
        port = int(port_file.read_text())
        assert line == f"tether model server listening on http://127.0.0.1:{port}/v1\n"
        reply = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": USER})
        assert reply.json()["choices"][0]["message"]["content"] == "from the cli"
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=5)
        assert process.stdout is not None
        assert process.stderr is not None
        rest = process.stdout.read()
        errors = process.stderr.read()
    assert returncode == 0
    assert rest == ""
    assert errors == ""


@contextmanager
def kept_alive(port: int) -> Generator[socket.socket]:
    """A connection to the server on `port` that has had one answer and is kept open
    (HTTP/1.1 keep-alive), for a test to see what the server's stop does to it."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/_tether/health")
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200
        assert not answer.will_close
        assert connection.sock is not None
        yield connection.sock
    finally:
        connection.close()


def test_stop_ends_a_kept_alive_connection_and_its_handler() -> None:
    server = ModelServer({"steps": [{"text": "one"}]}).start()
    with kept_alive(server.port) as sock:
        server.stop()
        # Its handler no longer waits for a next request: stop ended it before returning.
        assert [t.name for t in threading.enumerate() if t.name.startswith("model-server")] == []
        assert sock.recv(1) == b""  # closed by the server (the 30 s timeout: a failure)


def test_sigterm_ends_a_kept_alive_connection_and_the_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "one"}]}))
    port_file = tmp_path / "port"
    command = [sys.executable, "-P", "-m", "tether.testing", "--script", str(script)]
    with (
        _serving([*command, "--port-file", str(port_file)]) as (process, _),
        kept_alive(int(port_file.read_text())) as sock,
    ):
        process.send_signal(signal.SIGTERM)
        assert sock.recv(1) == b""
        assert process.wait(timeout=30) == 0


def test_tether_dev_model_server_serves_the_script(tmp_path: Path, client: httpx.Client) -> None:
    """`tether dev model-server --script FILE --port N` listens on that port, says which URL
    to give TETHER_BASE_URL, and answers from the script until SIGTERM."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model": "dev-model", "steps": [{"text": "from tether dev"}]}))
    port = free_port()
    command = [
        sys.executable,
        *("-P", "-m", "tether.clients.cli.main", "dev", "model-server"),
        *("--script", str(script), "--port", str(port)),
    ]
    with _serving(command) as (process, line):
        base_url = f"http://127.0.0.1:{port}/v1"
        assert line == f"tether model server listening on {base_url}\n"
        assert process.stderr is not None
        hint = _read_line(process.stderr, timeout=10)
        assert f"TETHER_BASE_URL={base_url} TETHER_MODEL=scripted" in hint
        reply = client.post(f"{base_url}/chat/completions", json={"messages": USER})
        assert reply.status_code == 200
        assert reply.json()["model"] == "dev-model"
        assert reply.json()["choices"][0]["message"]["content"] == "from tether dev"
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=5)
    assert returncode == 0


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ([], "the following arguments are required: --script"),
        (["--script", "missing.json"], "missing.json"),
        (["--script", "s.json", "--port", "many"], "invalid int value: 'many'"),
    ],
)
def test_tether_dev_model_server_explains_bad_arguments(
    tmp_path: Path, arguments: list[str], expected: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", "dev", "model-server", *arguments],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "tether dev model-server" in done.stderr
    assert expected in done.stderr


# --- reasoning, models without tools, Anthropic Messages ------------------------------------


def test_reasoning_streams_before_the_text(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"reasoning": "a" * 30, "text": "done"}]}) as server:
        chunks, _ = stream(client, server)
    deltas = [c["delta"] for c in choice_chunks(chunks)]
    assert [d.get("reasoning_content") for d in deltas[:2]] == ["a" * 15, "a" * 15]
    assert deltas[0]["role"] == "assistant"
    assert reassemble(chunks) == ("done", {}, "stop")


TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "read_file", "parameters": {}}}
]
NO_TOOLS_SCRIPT = {
    "model": "gemma3",
    "tool_support": "none",
    "steps": [
        {"text": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]},
        {"tool_calls": [{"name": "list_dir", "arguments_raw": "{oops"}]},
    ],
}
READING_AS_TEXT = 'Reading.\n\n<tool_call>{"name":"read_file","arguments":{"path":"a"}}</tool_call>'


def test_a_model_without_tools_refuses_them_and_writes_calls_as_text(
    client: httpx.Client,
) -> None:
    with ModelServer(NO_TOOLS_SCRIPT) as server:
        url = f"{server.base_url}/chat/completions"
        refused = client.post(url, json={"messages": USER, "stream": True, "tools": TOOLS})
        first, _ = stream(client, server)
        second, _ = stream(client, server)
        recorded = server.requests
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "registry.ollama.ai/library/gemma3 does not support tools"
    )
    assert reassemble(first) == (READING_AS_TEXT, {}, "stop")
    assert reassemble(second)[0] == '<tool_call>{"name":"list_dir","arguments":{oops}</tool_call>'
    # The refusal was recorded but took no step.
    assert len(recorded) == 3
    assert "tools" in recorded[0]
    assert "tools" not in recorded[1]


ANTHROPIC_USER = [{"role": "user", "content": "hello model"}]


def anthropic_stream(
    client: httpx.Client, server: ModelServer, **extra: Any
) -> list[tuple[str, dict[str, Any]]]:
    """POST a streaming Messages request; return (event name, data) pairs."""
    body = {"model": "m", "max_tokens": 100, "messages": ANTHROPIC_USER, "stream": True, **extra}
    pairs: list[tuple[str, dict[str, Any]]] = []
    with client.stream("POST", f"{server.url}/v1/messages", json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                assert data["type"] == name
                pairs.append((name, data))
    return pairs


def fold(pairs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Assemble a Messages stream the way a client does."""
    blocks: dict[int, dict[str, Any]] = {}
    result: dict[str, Any] = {}
    for name, data in pairs:
        if name == "message_start":
            result["input_tokens"] = data["message"]["usage"]["input_tokens"]
        elif name == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "partial": ""}
        elif name == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                block["partial"] += delta["partial_json"]
        elif name == "message_delta":
            result["stop_reason"] = data["delta"]["stop_reason"]
            result["output_tokens"] = data["usage"]["output_tokens"]
    result["blocks"] = [blocks[i] for i in sorted(blocks)]
    assert pairs[-1][0] == "message_stop"
    return result


def test_anthropic_stream_has_thinking_text_and_tool_use_blocks(client: httpx.Client) -> None:
    step = {
        "reasoning": "think",
        "text": "Reading both.",
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "README.md"}},
            {"name": "list_dir", "arguments": {"path": "src"}, "id": "toolu_x"},
        ],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7},
    }
    with ModelServer({"steps": [step, {"text": "cut", "finish_reason": "length"}]}) as server:
        pairs = anthropic_stream(client, server, tools=[{"name": "t", "input_schema": {}}])
        second = fold(anthropic_stream(client, server))
    assert [name for name, _ in pairs[:2]] == ["message_start", "ping"]
    result = fold(pairs)
    assert (result["input_tokens"], result["output_tokens"]) == (42, 7)
    assert result["stop_reason"] == "tool_use"
    thinking, text, read, listing = result["blocks"]
    assert (thinking["type"], thinking["thinking"]) == ("thinking", "think")
    assert (text["type"], text["text"]) == ("text", "Reading both.")
    assert (read["type"], read["id"], read["name"]) == ("tool_use", "toolu_0_0", "read_file")
    assert json.loads(read["partial"]) == {"path": "README.md"}
    assert (listing["id"], json.loads(listing["partial"])) == ("toolu_x", {"path": "src"})
    assert sum(1 for n, d in pairs if n == "content_block_delta" and d["index"] == 2) == 2
    assert second["stop_reason"] == "max_tokens"
    assert second["blocks"] == [{"type": "text", "text": "cut", "partial": ""}]


def test_anthropic_errors_have_the_api_shape(client: httpx.Client) -> None:
    steps = [
        {"error": {"status": 529}},
        {"error": {"status": 429, "retry_after": 3, "message": "slow down"}},
        {"error": {"status": 400, "type": "custom_error", "message": "no"}},
    ]
    body = {"model": "m", "max_tokens": 5, "messages": ANTHROPIC_USER, "stream": True}
    with ModelServer({"steps": steps}) as server:
        replies = [client.post(f"{server.url}/v1/messages", json=body) for _ in range(4)]
    assert [r.status_code for r in replies] == [529, 429, 400, 500]
    assert replies[0].json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "scripted error 529"},
    }
    assert replies[1].json()["error"] == {"type": "rate_limit_error", "message": "slow down"}
    assert replies[1].headers["retry-after"] == "3"
    assert replies[2].json()["error"]["type"] == "custom_error"
    assert replies[3].json()["error"]["type"] == "api_error"


def test_anthropic_drop_after_chunks_cuts_the_stream(client: httpx.Client) -> None:
    steps = [{"text": "partial answer", "drop_after_chunks": 3}]
    body = {"model": "m", "max_tokens": 5, "messages": ANTHROPIC_USER, "stream": True}
    with ModelServer({"steps": steps}) as server:
        lines: list[str] = []
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", f"{server.url}/v1/messages", json=body) as response,
        ):
            lines.extend(line for line in response.iter_lines() if line.startswith("event:"))
    assert lines == ["event: message_start", "event: ping", "event: content_block_start"]


def test_anthropic_whole_message_when_not_streamed(client: httpx.Client) -> None:
    steps = [{"text": "hi", "tool_calls": [{"name": "grep", "arguments": {"q": "x"}}]}]
    body = {"model": "m", "max_tokens": 5, "messages": ANTHROPIC_USER}
    with ModelServer({"model": "claude-fake", "steps": steps}) as server:
        reply = client.post(f"{server.base_url}/messages", json=body).json()
    assert reply["type"] == "message"
    assert reply["model"] == "claude-fake"
    assert reply["content"] == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "toolu_0_0", "name": "grep", "input": {"q": "x"}},
    ]
    assert reply["stop_reason"] == "tool_use"
    assert set(reply["usage"]) == {"input_tokens", "output_tokens"}


CALL: dict[str, Any] = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
BAD_ANTHROPIC_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"messages": ANTHROPIC_USER}, "max_tokens"),
    ({"max_tokens": 5, "messages": []}, "at least one message"),
    (
        {"max_tokens": 5, "messages": [*ANTHROPIC_USER, *ANTHROPIC_USER]},
        "roles must alternate",
    ),
    (
        {
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        },
        "non-whitespace text",
    ),
    (
        {
            "max_tokens": 5,
            "messages": [
                *ANTHROPIC_USER,
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": "thanks"},
            ],
        },
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: t1",
    ),
    (
        {
            "max_tokens": 5,
            "messages": [
                *ANTHROPIC_USER,
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [{"type": "text", "text": "a"}, RESULT]},
            ],
        },
        "tool_result blocks must come before any other content",
    ),
    (
        {"max_tokens": 5, "messages": [{"role": "user", "content": [RESULT]}]},
        "unexpected `tool_use_id`",
    ),
    ({"max_tokens": 5, "messages": ANTHROPIC_USER, "tools": [{"name": "x"}]}, "input_schema"),
    ({"max_tokens": 5, "messages": ANTHROPIC_USER, "system": [{"type": "text"}]}, "system.0"),
]


@pytest.mark.parametrize(("body", "problem"), BAD_ANTHROPIC_REQUESTS)
def test_malformed_anthropic_requests_are_refused_like_the_api_does(
    client: httpx.Client, body: dict[str, Any], problem: str
) -> None:
    with ModelServer({"steps": [{"text": "fine"}]}) as server:
        url = f"{server.url}/v1/messages"
        refused = client.post(url, json={"model": "m", **body})
        accepted = client.post(
            url, json={"model": "m", "max_tokens": 5, "messages": ANTHROPIC_USER}
        )
        recorded = server.requests
    assert refused.status_code == 400
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert problem in refused.json()["error"]["message"]
    assert accepted.status_code == 200  # the refusal took no step
    assert len(recorded) == 2


def test_anthropic_model_without_tools(client: httpx.Client) -> None:
    body: dict[str, Any] = {"model": "llama3", "max_tokens": 5, "messages": ANTHROPIC_USER}
    with ModelServer(NO_TOOLS_SCRIPT) as server:
        url = f"{server.url}/v1/messages"
        tools: list[dict[str, Any]] = [{"name": "t", "input_schema": {}}]
        refused = client.post(url, json={**body, "tools": tools})
        answered = client.post(url, json=body).json()
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "type": "invalid_request_error",
        "message": "llama3 does not support tools",
    }
    assert answered["content"] == [{"type": "text", "text": READING_AS_TEXT}]
    assert answered["stop_reason"] == "end_turn"


def test_model_list_in_either_shape(client: httpx.Client) -> None:
    with ModelServer({"model": "fake-3", "steps": []}) as server:
        openai = client.get(f"{server.base_url}/models").json()
        anthropic = client.get(
            f"{server.base_url}/models", headers={"anthropic-version": "2023-06-01"}
        ).json()
    assert openai["object"] == "list"
    assert [m["id"] for m in openai["data"]] == ["fake-3"]
    assert anthropic == {
        "data": [{"id": "fake-3", "type": "model", "display_name": "fake-3"}],
        "has_more": False,
        "first_id": "fake-3",
        "last_id": "fake-3",
    }


def test_wait_for_requests_wakes_on_arrival_and_says_how_many_came(client: httpx.Client) -> None:
    with ModelServer({"steps": [{"text": "a"}, {"text": "b"}]}) as server:
        waiter: list[list[Any]] = []
        thread = threading.Thread(target=lambda: waiter.append(server.wait_for_requests(2)))
        thread.start()
        stream(client, server)
        stream(client, server)
        thread.join(timeout=10)
        assert [len(got) for got in waiter] == [2]
        with pytest.raises(TimeoutError, match=r"2 model requests arrived within 0\.01 s, not 3"):
            server.wait_for_requests(3, timeout=0.01)
