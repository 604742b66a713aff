"""Answers that are not a clean model stream, in both dialects, over real HTTP from the scripted
model server: what each is reported as, and whether it is worth retrying."""

from collections.abc import Iterator

import pytest
import trio

from tests.replay import Collect
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import (
    Message,
    ModelClient,
    ModelProtocolError,
    ModelRequest,
    ModelResponse,
)
from tether.daemon.providers.openai import OpenAIChatClient
from tether.testing import ModelServer

DIALECTS = ["openai", "anthropic"]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer({"steps": []}) as server:
        yield server


def client_for(dialect: str, server: ModelServer) -> ModelClient:
    if dialect == "anthropic":
        return AnthropicMessagesClient(base_url=server.url, model="scripted")
    return OpenAIChatClient(base_url=server.base_url, model="scripted")


REQUEST = ModelRequest(
    messages=[Message(role="system", content="s"), Message(role="user", content="hi")]
)


async def complete(dialect: str, server: ModelServer) -> tuple[ModelResponse, str]:
    client = client_for(dialect, server)
    collect = Collect()
    try:
        with trio.fail_after(10):
            response = await client.complete(REQUEST, collect)
    finally:
        await client.aclose()
    return response, "".join(collect.text)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_malformed_line_in_a_complete_stream_costs_a_warning_not_the_reply(
    dialect: str, server: ModelServer
) -> None:
    server.set_script(
        {"steps": [{"text": "the whole answer", "chunks": 4, "malformed_after_chunks": 2}]}
    )
    response, streamed = await complete(dialect, server)
    assert response.text == streamed == "the whole answer"
    (warning,) = response.warnings
    assert "Skipped 1 line" in warning
    assert '{"choices": [{"delta": {"content": "unfinished' in warning
    assert len(server.requests) == 1


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_html_page_served_with_200_is_reported_and_final(
    dialect: str, server: ModelServer
) -> None:
    page = "<!DOCTYPE html><html><title>Corporate proxy: sign in</title>" + "<br>" * 500
    server.set_script({"steps": [{"page": {"body": page}}]})
    with pytest.raises(ModelProtocolError) as caught:
        await complete(dialect, server)
    message = caught.value.message
    assert not caught.value.retryable
    assert "HTTP 200 with text/html; charset=utf-8, not an event stream" in message
    assert "Corporate proxy: sign in" in message
    assert "ended before" not in message
    assert len(message) < 600


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_dropped_stream_is_still_retryable(dialect: str, server: ModelServer) -> None:
    server.set_script({"steps": [{"text": "cut short", "chunks": 4, "drop_after_chunks": 2}]})
    with pytest.raises(ModelProtocolError) as caught:
        await complete(dialect, server)
    assert caught.value.retryable
    assert "broke off" in caught.value.message
