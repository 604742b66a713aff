"""The environment a command gets.

Rules:
- A command gets the daemon's environment (or a given one) without the variables whose names
  look secret (`SECRET_PATTERNS`, matched upper-cased), plus `COMMAND_ENV`: no colours, no
  pager, no prompt or editor waiting for a person.
- The filter is the same for every process the daemon starts for the user (commands, language
  servers): `command_env` is the one place it is decided.
"""

import fnmatch
import functools
import os
from collections.abc import Mapping

SECRET_PATTERNS = (
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*APIKEY*",
    "*API_KEY*",
    "*PRIVATE_KEY*",
    "*_KEY",
    "*_KEY_ID",
    "*COOKIE*",
    "*_PAT",
    "*AUTH_HEADER*",
)
"""Environment variable names (matched upper-cased) that commands do not get."""

COMMAND_ENV = {
    "NO_COLOR": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
}
"""Set for every command: no colours, no pager, no prompt or editor waiting for a person."""


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # Cached: every command filters the whole environment, a few hundred fnmatch calls.
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def command_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: `base` (default: the daemon's) without secret-looking
    variables, plus `COMMAND_ENV`."""
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if not is_secret_name(name)}
    env.update(COMMAND_ENV)
    return env
