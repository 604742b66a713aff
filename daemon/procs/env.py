"""The environment a command gets.

Rules:
- A command gets the daemon's environment (or a given one) without the secret variables, plus
  `COMMAND_ENV`: no colours, no pager, no prompt or editor waiting for a person.
- A variable is secret when its name looks secret (`SECRET_PATTERNS`, matched upper-cased:
  `*TOKEN*`, `*_AUTH`, `*_DSN`, …) or its value embeds a password in a URL
  (`scheme://user:password@…`, `redis://:password@…`), whatever its name (`DATABASE_URL`,
  `HTTP_PROXY`). Name patterns stay anchored on word parts so `AUTHOR`, `OAUTH_CALLBACK_PORT`,
  `KEYBOARD` or a URL without a password (`sqlite:///x`, `https://host/`, `git@host:x`) pass.
- The filter is the same for every process the daemon starts for the user (commands, language
  servers): `command_env` is the one place it is decided.
"""

import fnmatch
import functools
import os
import re
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
    "AUTH",
    "*_AUTH",
    "DSN",
    "*_DSN",
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


_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")
"""A URL's userinfo with a non-empty password: `scheme://user:password@`."""


def is_secret_variable(name: str, value: str) -> bool:
    """Whether a variable is kept from commands (and masked in the log): its name looks secret,
    or its value embeds a password in a URL."""
    return is_secret_name(name) or _URL_PASSWORD.search(value) is not None


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # Cached: every command filters the whole environment, a few hundred fnmatch calls.
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def command_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: `base` (default: the daemon's) without secret
    variables (`is_secret_variable`), plus `COMMAND_ENV`."""
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if not is_secret_variable(name, value)}
    env.update(COMMAND_ENV)
    return env
