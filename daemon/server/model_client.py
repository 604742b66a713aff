"""Which model client a daemon uses, from the (protected) provider settings."""

from functools import partial

from tether.daemon.config.settings import DEFAULT_BASE_URL, ProviderConfig
from tether.daemon.config.vision import takes_images
from tether.daemon.providers import anthropic
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.openai import OpenAIChatClient


def create_client(
    provider: ProviderConfig, *, config_hint: str
) -> OpenAIChatClient | AnthropicMessagesClient:
    """The client for `provider.kind`. For `anthropic`, the untouched default base URL (the
    local Ollama one) means api.anthropic.com."""
    base_url = provider.base_url
    if provider.kind == "anthropic":
        if base_url == DEFAULT_BASE_URL:
            base_url = anthropic.DEFAULT_BASE_URL
        make = partial(AnthropicMessagesClient, max_output_tokens=provider.max_output_tokens)
    else:
        make = OpenAIChatClient
    return make(
        base_url=base_url,
        model=provider.model,
        api_key=provider.api_key,
        silence_timeout=provider.request_timeout,
        tool_mode=provider.tool_mode,
        config_hint=config_hint,
        images=provider.images
        if provider.images is not None
        else takes_images(provider, {}, provider.model),
    )
