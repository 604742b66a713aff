"""Which model client a daemon uses, from the (protected) provider settings."""

from tether.daemon.config.settings import DEFAULT_BASE_URL, ProviderConfig
from tether.daemon.providers import anthropic
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.openai import OpenAIChatClient


def create_client(
    provider: ProviderConfig, *, config_hint: str
) -> OpenAIChatClient | AnthropicMessagesClient:
    """The client for `provider.kind`. For `anthropic`, the untouched default base URL (the
    local Ollama one) means api.anthropic.com."""
    if provider.kind == "anthropic":
        base_url = provider.base_url
        if base_url == DEFAULT_BASE_URL:
            base_url = anthropic.DEFAULT_BASE_URL
        return AnthropicMessagesClient(
            base_url=base_url,
            model=provider.model,
            api_key=provider.api_key,
            max_output_tokens=provider.max_output_tokens,
            silence_timeout=provider.request_timeout,
            tool_mode=provider.tool_mode,
            config_hint=config_hint,
        )
    return OpenAIChatClient(
        base_url=provider.base_url,
        model=provider.model,
        api_key=provider.api_key,
        silence_timeout=provider.request_timeout,
        tool_mode=provider.tool_mode,
        config_hint=config_hint,
    )
