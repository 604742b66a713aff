"""Both provider dialects end to end: the real daemon, configured through the environment,
against the scripted model server speaking Anthropic Messages, or playing an OpenAI-compatible
model without tool support (the text tool-call fallback)."""

import re
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    completed_items,
    create_session,
    start_daemon,
    start_turn,
)
from tether.protocol.events import ItemDelta, TurnCompleted
from tether.protocol.items import AgentMessage, Reasoning, ToolCall
from tether.protocol.methods import MODELS_LIST, SessionEventParams
from tether.testing import ModelServer


@contextmanager
def running(home: Home, workspace: Path) -> Generator[DaemonProcess]:
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        yield daemon
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()


def use_anthropic(home: Home, model_server: ModelServer) -> None:
    # The server root; the client also takes the `/v1` form (see the unit tests).
    home.env["TETHER_BASE_URL"] = model_server.url
    home.env["TETHER_PROVIDER"] = "anthropic"
    home.env["ANTHROPIC_API_KEY"] = "sk-ant-test"
    home.env["OPENAI_API_KEY"] = "sk-openai-not-for-anthropic"


def run_turn(
    daemon: DaemonProcess, text: str, session_id: str | None = None
) -> tuple[str, list[SessionEventParams]]:
    with daemon.client() as client:
        session = session_id or create_session(client)
        attach(client, session)
        start_turn(client, session, text)
        return session, collect_until_turn_end(client, session)


def turn_end(events: list[SessionEventParams]) -> TurnCompleted:
    last = events[-1].event
    assert isinstance(last, TurnCompleted)
    return last


def test_anthropic_turn_with_thinking_a_tool_call_and_an_answer(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                {
                    "reasoning": "The README will say.",
                    "text": "Let me read it.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 30},
                },
                {"text": "It greets people.", "chunks": 3},
            ]
        }
    )
    use_anthropic(home, model_server)
    with running(home, workspace) as daemon:
        _, events = run_turn(daemon, "what does it do?")

    end = turn_end(events)
    assert end.status == "completed", end.error
    items = completed_items(events)
    assert [i.text for i in items if isinstance(i, Reasoning)] == ["The README will say."]
    assert [i.text for i in items if isinstance(i, AgentMessage)] == [
        "Let me read it.",
        "It greets people.",
    ]
    (call,) = [i for i in items if isinstance(i, ToolCall)]
    assert (call.tool, call.call_id, call.status) == ("read_file", "toolu_0_0", "completed")
    assert "Demo project" in call.output
    assert end.usage.input_tokens >= 900
    assert end.usage.output_tokens >= 30

    for headers in model_server.request_headers:
        assert headers["x-api-key"] == "sk-ant-test"
        assert "authorization" not in headers
    first, second = model_server.requests
    for body in (first, second):
        assert body["model"] == "scripted"
        assert body["max_tokens"] == 8192
        assert body["stream"] is True
        assert body["system"][0]["type"] == "text"
        assert body["system"][0]["text"]
        assert "read_file" in [tool["name"] for tool in body["tools"]]
        assert all("input_schema" in tool for tool in body["tools"])
    assert second["system"] == first["system"]
    assert second["tools"] == first["tools"]
    question, reply, results = second["messages"]
    assert question["role"] == "user"
    assert question["content"][0] == {"type": "text", "text": "what does it do?"}
    assert reply == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me read it."},
            {
                "type": "tool_use",
                "id": "toolu_0_0",
                "name": "read_file",
                "input": {"path": "README.md"},
            },
        ],
    }
    assert results["role"] == "user"
    (result,) = results["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_0_0")
    assert "Demo project" in result["content"]


def test_the_config_files_kind_picks_the_key_the_server_receives(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[provider]\nkind = "anthropic"\n')
    home.env["OPENAI_API_KEY"] = "sk-openai"
    home.env["ANTHROPIC_API_KEY"] = "sk-ant"
    with running(home, workspace) as daemon:
        _, events = run_turn(daemon, "hello")
    assert turn_end(events).status == "completed"
    (headers,) = model_server.request_headers
    assert headers["x-api-key"] == "sk-ant"
    assert "authorization" not in headers


def test_anthropic_models_list_over_rpc(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"model": "claude-scripted", "steps": []})
    use_anthropic(home, model_server)
    home.env["TETHER_MODEL"] = "claude-scripted"
    with running(home, workspace) as daemon, daemon.client() as client:
        listing = client.call(MODELS_LIST)
    assert [m.id for m in listing.models] == ["claude-scripted"]
    assert (listing.current, listing.provider) == ("claude-scripted", "anthropic")


TOOL_RESULT = re.compile(
    r'<tool_result name="read_file" id="(call_[0-9a-f]+)">\n(.*)\n</tool_result>', re.S
)


@pytest.mark.shared_daemon
def test_text_tool_calls_when_the_model_refuses_tools(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "tool_support": "none",
            "steps": [
                {
                    "text": "Let me look.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}],
                },
                {"text": "It greets people."},
                {"text": "You're welcome."},
            ],
        }
    )
    session, events = run_turn(daemon, "what does it do?")

    assert turn_end(events).status == "completed"
    items = completed_items(events)
    assert [i.text for i in items if isinstance(i, AgentMessage)] == [
        "Let me look.",
        "It greets people.",
    ]
    deltas = "".join(e.event.delta for e in events if isinstance(e.event, ItemDelta))
    assert "<tool_call" not in deltas
    (call,) = [i for i in items if isinstance(i, ToolCall)]
    assert (call.tool, call.status) == ("read_file", "completed")
    assert "Demo project" in call.output

    refused, retried, answered = model_server.requests
    assert "tools" in refused
    for body in (retried, answered):
        assert "tools" not in body
        assert all(m["role"] in ("system", "user", "assistant") for m in body["messages"])
        system = body["messages"][0]["content"]
        assert "### read_file" in system
        assert '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>' in system
    assert retried["messages"][1:] == [{"role": "user", "content": "what does it do?"}]
    *_, reply, result = answered["messages"]
    assert reply["role"] == "assistant"
    assert reply["content"] == (
        'Let me look.\n\n<tool_call>{"name":"read_file","arguments":{"path":"README.md"}}'
        "</tool_call>"
    )
    assert result["role"] == "user"
    found = TOOL_RESULT.fullmatch(result["content"])
    assert found is not None, result["content"]
    assert found.group(1) == call.call_id
    assert "Demo project" in found.group(2)

    # The switch is remembered: the next turn goes straight to text mode, one request a step.
    _, events = run_turn(daemon, "thanks", session)
    assert turn_end(events).status == "completed"
    assert len(model_server.requests) == 4
    last: dict[str, Any] = model_server.requests[-1]
    assert "tools" not in last
    assert last["messages"][-1] == {"role": "user", "content": "thanks"}
