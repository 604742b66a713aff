"""Globs matched segment by segment: the same answers as the regex translation they replace on
ordinary patterns, and pathological patterns (which made that translation backtrack for
minutes) answered in a bounded number of steps."""

import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import TraceFunction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.daemon.pathglob import MAX_ALTERNATIVES, GlobError, compile_glob
from tether.daemon.tools.filetree import GitignorePattern


def reference_regex(pattern: str) -> re.Pattern[str]:
    """The translation globs went through before: a backtracking regex of the whole path."""
    return re.compile(_reference(pattern) + r"\Z", re.DOTALL)


def _reference(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            before_ok = i == 0 or pattern[i - 1] == "/"
            after = pattern[i + 2 : i + 3]
            if before_ok and after == "/":
                out.append("(?:.*/)?")
                i += 3
                continue
            if before_ok and after == "":
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[{'^/' if negate else ''}{body}]")
                i = end + 1
                continue
        elif c == "{":
            end = pattern.find("}", i)
            if end == -1:
                out.append(re.escape(c))
            else:
                options = pattern[i + 1 : end].split(",")
                out.append("(?:" + "|".join(_reference(option) for option in options) + ")")
                i = end + 1
                continue
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


PATTERNS = [
    "*.py", "**/*.py", "src/**/*.{ts,tsx}", "*.md", "**", "**/*", "a/**", "a/**/b", "**/b",
    "a/*/c", "a?c", "[ab]*", "[!a]*", "[^a]*.txt", "{src,lib}/**/*.rs", "**/test_*.py",
    "docs/*.md", "a\\*b", "*.{json,yaml,yml}", "**/node_modules/**", ".*", "**/.env*",
    "a/**/**/b", "**/**", "x*y*z", "*a*", "?", "a{b,c}d/e", "[a-c]?/*",
]  # fmt: skip

PATHS = [
    "a.py", "src/a.py", "src/x/y/z.ts", "src/x/y/z.tsx", "README.md", "docs/intro.md",
    "a/b", "a/x/b", "a/x/y/b", "a", "b", "a/c", "a/x/c", "abc", "a*b", "axb", "lib/m/n.rs",
    "tests/test_glob.py", "conf.yaml", "x/node_modules/y", ".env", "cfg/.env.local",
    "xay/yzz", "xyz", "xaybzc", "bcd/e", "c", "b9/q",
]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_same_answers_as_the_regex_translation(pattern: str) -> None:
    glob, reference = compile_glob(pattern), reference_regex(pattern)
    for path in PATHS:
        assert glob.match(path) == (reference.match(path) is not None), (pattern, path)


_SEGMENT_PARTS = st.sampled_from(["a", "b", ".", "x", "*", "?", "[ab]", "[!a]", "{a,b}", "**"])
_segments = st.lists(_SEGMENT_PARTS, min_size=1, max_size=4).map("".join)
_patterns = st.lists(_segments, min_size=1, max_size=5).map("/".join)
_names = st.text(alphabet="abx.", min_size=1, max_size=6)
_paths = st.lists(_names, min_size=1, max_size=6).map("/".join)


@settings(max_examples=600, deadline=None)
@given(_patterns, st.lists(_paths, min_size=1, max_size=8))
def test_generated_patterns_agree_with_the_regex_translation(
    pattern: str, paths: list[str]
) -> None:
    glob, reference = compile_glob(pattern), reference_regex(pattern)
    for path in paths:
        assert glob.match(path) == (reference.match(path) is not None), (pattern, path)


def count_lines(call: Callable[[], object]) -> int:
    """The Python lines `call` runs: a measure of work that does not depend on the machine."""
    lines = 0

    def tracer(frame: FrameType, event: str, arg: object) -> "TraceFunction":
        nonlocal lines
        if event == "line":
            lines += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return lines


DEEP_PATH = "/".join(f"d{i}" for i in range(25)) + "/file.txt"
LONG_NAME = "a" * 60


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("**/" * 10 + "*.py", DEEP_PATH),
        ("*a*a*a*a*a*a*a*ab", LONG_NAME),
        ("**/" * 10 + "*a*a*a*a*a*a*a*ab", DEEP_PATH + "/" + LONG_NAME),
        ("*/" * 20 + "x", DEEP_PATH),
        ("*" + "?*" * 30 + "b", LONG_NAME * 4),
    ],
)
def test_pathological_patterns_take_few_steps(pattern: str, path: str) -> None:
    glob = compile_glob(pattern)
    assert not glob.match(path)
    assert count_lines(lambda: glob.match(path)) < 5_000


def test_too_many_alternatives_is_a_clear_error() -> None:
    with pytest.raises(GlobError, match=f"more than {MAX_ALTERNATIVES} alternatives"):
        compile_glob("{a,b}" * 9)
    compile_glob("{a,b}" * 8)  # 256


def test_a_class_that_is_not_one_is_a_clear_error() -> None:
    with pytest.raises(GlobError, match="not a valid glob"):
        compile_glob("[z-a]")


def test_gitignore_patterns_match_as_before() -> None:
    assert GitignorePattern("*.log").matches("logs/x.log", False)
    assert GitignorePattern("/build").matches("build", True)
    assert not GitignorePattern("/build").matches("src/build", True)
    assert GitignorePattern("docs/**/*.md").matches("docs/a/b.md", False)
    assert not GitignorePattern("out/").matches("out", False)
    slow = GitignorePattern("*a*a*a*a*a*a*a*ab")
    assert count_lines(lambda: slow.matches(LONG_NAME, False)) < 5_000
