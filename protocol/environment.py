"""The environment a client sends with a turn, and the variables nobody sends or keeps.

A daemon outlives the shell that started it; a client's shell may have changed since (a venv
activated, PATH edited). So `turn/start` may carry the client's environment, and the turn's
commands and hooks run in it. Secret variables are dropped by the client before it sends
them and again by the daemon on receipt, before anything is kept or logged: commands never
get them, wherever they came from.

A variable is secret when its name looks secret (`SECRET_PATTERNS`, matched upper-cased:
`*TOKEN*`, `*_AUTH`, `*_DSN`, …) or its value embeds a password in a URL
(`scheme://user:password@…`, `redis://:password@…`), whatever its name (`DATABASE_URL`,
`HTTP_PROXY`). Name patterns stay anchored on word parts so `AUTHOR`, `OAUTH_CALLBACK_PORT`,
`KEYBOARD` or a URL without a password (`sqlite:///x`, `https://host/`, `git@host:x`) pass.
"""

import fnmatch
import functools
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


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # Cached: every command filters the whole environment, a few hundred fnmatch calls.
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")
"""A URL's userinfo with a non-empty password: `scheme://user:password@`."""


def is_secret_variable(name: str, value: str) -> bool:
    """Whether a variable is kept from commands (and masked in the log): its name looks secret,
    or its value embeds a password in a URL."""
    if is_secret_name(name):
        return True
    # Most values hold no `@`: the search, a few µs each, runs only on those that might.
    return "@" in value and _URL_PASSWORD.search(value) is not None


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without its secret variables (`is_secret_variable`)."""
    return {name: value for name, value in env.items() if not is_secret_variable(name, value)}
