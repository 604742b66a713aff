"""The environment a client sends with a turn, and the variables nobody sends or keeps.

A daemon outlives the shell that started it; a client's shell may have changed since (a venv
activated, PATH edited). So `turn/start` may carry the client's environment, and the turn's
commands and hooks run in it. Variables whose names look secret (`SECRET_PATTERNS`, matched
upper-cased) are dropped by the client before it sends them and again by the daemon on
receipt, before anything is kept or logged: commands never get them, wherever they came from.
"""

import fnmatch
import functools
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


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # Cached: every command filters the whole environment, a few hundred fnmatch calls.
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the variables whose names look secret."""
    return {name: value for name, value in env.items() if not is_secret_name(name)}
