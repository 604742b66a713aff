"""Which regexes the Python search accepts: valid ones without nested repetition, which can
take exponential time in Python's backtracking engine (ripgrep's engine is linear)."""

import importlib
import re
from typing import Any

from tether.daemon.tools.base import ToolFailure

_sre_parse: Any = importlib.import_module("re._parser")
_sre_constants: Any = importlib.import_module("re._constants")
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_BIG_REPEAT = 10


def _risky(items: Any, inside_repeat: bool) -> bool:
    """True if some repetition that can repeat many times contains another repetition of
    variable length (`(a+)+`, `(\\w*\\s?)*`, `(x{1,3}){20}`), or an alternation of branches
    starting alike (`(a|ab)*`): backtracking can then take exponential time."""
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = av
            variable = low != high
            if inside_repeat and variable:
                return True
            big = high == _sre_constants.MAXREPEAT or high > _BIG_REPEAT
            if _risky(body, inside_repeat or big):
                return True
        elif name == "SUBPATTERN":
            if _risky(av[-1], inside_repeat):
                return True
        elif name == "BRANCH":
            branches = av[1]
            if inside_repeat and _overlapping(branches):
                return True
            if any(_risky(branch, inside_repeat) for branch in branches):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _risky(av[1], inside_repeat):
                return True
        elif name == "ATOMIC_GROUP" and _risky(av, inside_repeat):
            return True
    return False


def _overlapping(branches: Any) -> bool:
    firsts: list[object] = []
    for branch in branches:
        items = list(branch)
        if not items:
            return True
        first = items[0]
        if str(first[0]) != "LITERAL":
            return True  # a class, a group…: assume it may overlap
        if first[1] in firsts:
            return True
        firsts.append(first[1])
    return False


def compile_fallback(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    """The pattern for Python's `re`; ToolFailure if invalid or risky."""
    flags = re.MULTILINE | (re.IGNORECASE if case_insensitive else 0)
    try:
        compiled = re.compile(pattern, flags)
        risky = _risky(_sre_parse.parse(pattern, flags), False)
    except re.error as exc:
        raise ToolFailure(f"Invalid regular expression {pattern!r}: {exc}.") from exc
    if risky:
        raise ToolFailure(
            f"The regex {pattern!r} nests repetition (like `(a+)+`), which can take "
            "exponential time in the Python search used here (ripgrep is not available). "
            "Rewrite it without a repeated group whose content also repeats (e.g. `(a+)+` → "
            "`a+`), or search for a plainer pattern."
        )
    return compiled
