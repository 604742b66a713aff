"""`initialize`'s params as plain JSON: the untyped first requests (`tether.clients.core.prelude`)
and the typed `Client` (`tether.clients.core.rpc`) send the same. Standard library only."""

from collections.abc import Mapping

from tether.protocol.version import PROTOCOL_VERSION, __version__

PROVIDER_VARIABLES = (
    ("provider", "TETHER_PROVIDER"),
    ("baseUrl", "TETHER_BASE_URL"),
    ("model", "TETHER_MODEL"),
    ("apiKey", "TETHER_API_KEY"),
    ("openaiApiKey", "OPENAI_API_KEY"),
    ("anthropicApiKey", "ANTHROPIC_API_KEY"),
)
"""`ProviderEnvironment`'s wire fields and the variables they carry."""


def initialize_params(client_name: str, env: Mapping[str, str]) -> dict[str, object]:
    """`initialize`'s params, sending `env`'s provider variables (see `ProviderEnvironment`)."""
    provider_env = {field: env[name] for field, name in PROVIDER_VARIABLES if env.get(name)}
    return {
        "clientName": client_name,
        "clientVersion": __version__,
        "protocolVersion": PROTOCOL_VERSION,
        "providerEnv": provider_env,
    }
