"""Which model client a daemon uses, from the (protected) provider settings."""

from tether.daemon.config import ProviderConfig
from tether.daemon.providers.base import ModelClient
from tether.daemon.providers.openai import OpenAIChatClient


def create_client(provider: ProviderConfig, *, config_hint: str) -> ModelClient:
    return OpenAIChatClient(
        base_url=provider.base_url,
        model=provider.model,
        api_key=provider.api_key,
        silence_timeout=provider.request_timeout,
        config_hint=config_hint,
    )
