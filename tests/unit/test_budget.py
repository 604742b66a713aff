"""The context budget and the token meter: the formula, the estimate, and a meter fed by the
usage a real client reads from the scripted model server over HTTP."""

from collections.abc import AsyncIterator

import msgspec
import pytest

from tether.daemon.context.budget import (
    TokenMeter,
    context_budget,
    message_chars,
    messages_tokens,
    toolset_chars,
)
from tether.daemon.context.history import History
from tether.daemon.providers.base import (
    Message,
    ModelRequest,
    ModelUsage,
    QuietCallbacks,
    ToolCallRequest,
    ToolSet,
    ToolSpec,
)
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.providers.stream import estimate_tokens
from tether.testing import ModelServer


def test_estimate_is_characters_over_three_and_a_half() -> None:
    assert estimate_tokens(0) == 0
    assert estimate_tokens(35) == 10
    assert estimate_tokens(3500) == 1000
    call = ToolCallRequest(id="c1", name="read_file", arguments='{"path":"a"}')
    message = Message(role="assistant", content="x" * 14, tool_calls=[call])
    assert message_chars(message) == 14 + len("read_file") + len('{"path":"a"}')
    assert messages_tokens([message]) == round(message_chars(message) / 3.5)
    assert messages_tokens([message, Message(role="user", content="y" * 7)]) == round(
        (message_chars(message) + 7) / 3.5
    )


def test_budget_formula() -> None:
    # (window - min(max_output, window / 4)) * 0.85
    assert context_budget(128_000, 8_192) == int((128_000 - 8_192) * 0.85) == 101_836
    # A large max_output is capped at a quarter of the window.
    assert context_budget(8_192, 4_096) == int((8_192 - 2_048) * 0.85) == 5_222
    assert context_budget(200_000, 64_000) == int((200_000 - 50_000) * 0.85)
    with pytest.raises(ValueError, match="positive"):
        context_budget(0, 100)


def toolset() -> ToolSet:
    params = msgspec.Raw(b'{"type":"object","properties":{"path":{"type":"string"}}}')
    return ToolSet(
        specs=[ToolSpec(name="read_file", description="Read a file.", parameters=params)]
    )


def test_meter_without_a_report_estimates_messages_and_tool_schemas() -> None:
    history = History("s" * 350)
    tools = toolset()
    meter = TokenMeter(history.messages, budget=1_000, tools=tools)
    assert toolset_chars(tools) > 0
    assert meter.used() == round((350 + toolset_chars(tools)) / 3.5)
    history.add_user("u" * 7_000)
    assert meter.used() == round((7_350 + toolset_chars(tools)) / 3.5)


def test_meter_adds_an_estimate_of_what_was_appended_since_the_report() -> None:
    history = History("system")
    history.add_user("hello")
    meter = TokenMeter(history.messages, budget=10_000)
    meter.record(ModelUsage(input_tokens=1_234, output_tokens=5))
    assert meter.used() == 1_234
    history.add_assistant("a" * 35, [])
    history.add_user("b" * 70)
    assert meter.used() == 1_234 + 10 + 20


def test_meter_ignores_usage_the_provider_only_estimated() -> None:
    history = History("system")
    history.add_user("x" * 700)
    meter = TokenMeter(history.messages, budget=10_000)
    meter.record(ModelUsage(input_tokens=1_000))
    meter.record(ModelUsage(input_tokens=99_999, estimated=True))
    assert meter.used() == round((6 + 700) / 3.5)


def test_meter_scales_the_report_when_the_history_shrank() -> None:
    history = History("system")
    history.add_user("x" * 6_994)  # 7,000 characters in all
    meter = TokenMeter(history.messages, budget=10_000)
    meter.record(ModelUsage(input_tokens=3_000))
    history.messages[1].content = "x" * 3_494  # half the characters are gone
    history.messages[1].chars = -1  # as compaction does when it changes a message
    assert meter.used() == 1_500


@pytest.fixture
async def client() -> AsyncIterator[tuple[ModelServer, OpenAIChatClient]]:
    with ModelServer({"steps": [{"text": "unused"}]}) as server:
        model = OpenAIChatClient(base_url=server.base_url, model="scripted")
        yield server, model
        await model.aclose()


async def test_meter_reads_the_usage_a_real_client_reports(
    client: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, model = client
    server.set_script(
        {"steps": [{"text": "hi", "usage": {"prompt_tokens": 4_321, "completion_tokens": 2}}]}
    )
    history = History("system")
    history.add_user("hello")
    meter = TokenMeter(history.messages, budget=100_000)
    response = await model.complete(ModelRequest(messages=history.messages), QuietCallbacks())
    meter.record(response.usage)
    assert meter.used() == 4_321
    history.add_assistant(response.text, response.tool_calls)
    history.add_user("z" * 350)
    assert meter.used() == 4_321 + 1 + 100
