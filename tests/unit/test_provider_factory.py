"""The factory picks the client for the configured provider kind."""

from tether.daemon.config.settings import ProviderConfig
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.server.model_client import create_client


async def test_openai_kind_gets_the_chat_completions_client() -> None:
    client = create_client(
        ProviderConfig(base_url="http://127.0.0.1:8000/v1/", model="m", tool_mode="text"),
        config_hint="cfg",
    )
    assert isinstance(client, OpenAIChatClient)
    assert (client.provider, client.base_url, client.model) == (
        "openai",
        "http://127.0.0.1:8000/v1",
        "m",
    )
    assert client.text_tools
    await client.aclose()


async def test_anthropic_kind_gets_the_messages_client() -> None:
    client = create_client(
        ProviderConfig(
            kind="anthropic",
            base_url="http://127.0.0.1:9000/v1",
            model="claude",
            max_output_tokens=2048,
            tool_mode="native",
        ),
        config_hint="cfg",
    )
    assert isinstance(client, AnthropicMessagesClient)
    assert (client.provider, client.base_url) == ("anthropic", "http://127.0.0.1:9000")
    assert (client.max_output_tokens, client.tool_mode) == (2048, "native")
    await client.aclose()


async def test_anthropic_with_the_untouched_default_url_goes_to_the_anthropic_api() -> None:
    client = create_client(ProviderConfig(kind="anthropic", model="claude"), config_hint="cfg")
    assert isinstance(client, AnthropicMessagesClient)
    assert client.base_url == "https://api.anthropic.com"
    await client.aclose()
