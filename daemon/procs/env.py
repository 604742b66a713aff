"""The environment a command gets.

Rules:
- A command gets the daemon's environment (or a given one: the environment of the client that
  started the turn) without the secret variables (names that look secret, values that embed
  a URL's password: `tether.protocol.environment`), plus `COMMAND_ENV`: no colours, no pager,
  no prompt or editor waiting for a person.
- The filter is the same for every process the daemon starts for the user (commands, language
  servers): `command_env` is the one place it is decided.
"""

import os
from collections.abc import Mapping

from tether.protocol.environment import (
    SECRET_PATTERNS,
    is_secret_name,
    is_secret_variable,
    without_secrets,
)
from tether.protocol.events import TurnEnvironment

__all__ = [
    "COMMAND_ENV",
    "SECRET_PATTERNS",
    "command_env",
    "is_secret_name",
    "is_secret_variable",
    "turn_environment",
]

COMMAND_ENV = {
    "NO_COLOR": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
}
"""Set for every command: no colours, no pager, no prompt or editor waiting for a person."""


def turn_environment(env: Mapping[str, str] | None) -> TurnEnvironment:
    """The brief of the environment a turn's commands start from: `env`, the one its client
    sent, or (None) the daemon's."""
    source = os.environ if env is None else env
    return TurnEnvironment(
        source="daemon" if env is None else "client",
        path=source.get("PATH", ""),
        virtual_env=source.get("VIRTUAL_ENV", ""),
        conda_prefix=source.get("CONDA_PREFIX", ""),
    )


def command_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: `base` (default: the daemon's) without secret
    variables (`is_secret_variable`), plus `COMMAND_ENV`."""
    env = without_secrets(os.environ if base is None else base)
    env.update(COMMAND_ENV)
    return env
