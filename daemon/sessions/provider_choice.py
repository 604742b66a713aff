"""Which provider settings a session's turns and subagents call: the user's, with the model
the session chose, and `images` settled for that model."""

import msgspec

from tether.daemon.config.settings import Config, ProviderConfig
from tether.daemon.config.vision import takes_images
from tether.daemon.sessions.session import Session


def subagent_provider(session: Session, config: Config) -> ProviderConfig:
    """The provider settings a subagent of `session` calls: the session's subagent model,
    else the user's `subagent_model`, else the turn's own."""
    model = session.subagent_model or config.subagent_model
    return provider_named(config, model) if model else provider_for(session, config)


def provider_for(session: Session, config: Config) -> ProviderConfig:
    """The provider settings a turn of `session` calls: the user's, with the session's own
    model when it chose one, and `images` settled for that model."""
    return provider_named(config, session.model)


def provider_named(config: Config, model: str) -> ProviderConfig:
    """The user's provider settings calling `model` (empty: theirs), `images` settled."""
    provider = config.provider
    if model:
        provider = msgspec.structs.replace(provider, model=model)
    return _with_images(provider, config)


def images_unsupported(model: str) -> str:
    """What IMAGES_UNSUPPORTED says for `model`."""
    return (
        f"the model {model} takes no images as far as tether knows, so nothing was sent; choose"
        " a model that does, or if this one does, say so in your config.toml with"
        f' [models."{model}"] images = true (docs/images.md)'
    )


def _with_images(provider: ProviderConfig, config: Config) -> ProviderConfig:
    return msgspec.structs.replace(
        provider, images=takes_images(config.provider, config.models, provider.model)
    )
