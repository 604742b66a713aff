"""Glob patterns matched against `/`-separated paths in time bounded by the lengths of the
pattern and the path, never exponential: a pattern comes from the model or from a workspace's
ignore files, and a match runs in the daemon, where a backtracking one would hold the
interpreter for minutes (`**/` ten times against a deep path, `*a*a*a*a*a*a*a*ab` against a
long name).

Syntax (the walk's, see `filetree`): `*` and `?` stay within one segment, a segment that is
exactly `**` spans zero or more folders (one or more names when it ends the pattern), `**`
inside a segment is `*`, `[abc]`/`[!abc]`/`[^abc]` are classes (never matching `/`), `{a,b}`
alternatives (not nested; at most MAX_ALTERNATIVES once expanded), `\\x` a literal `x`. A `/`
always separates segments.

How: braces are expanded into alternatives; each alternative is split into segments, and runs
of `**` collapse into one. A segment is cut at its stars into star-free pieces of fixed width,
each a small regex that cannot backtrack beyond its own width: the first piece must match at
the start of the name, the last at its end, and the ones between are found leftmost, in order
(the classic greedy wildcard match, correct because a star may take any run of characters).
Segments and `**` are matched the same way one level up, with a path's names in place of
characters. A match takes time in O(len(pattern) * len(path)) at worst.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

MAX_ALTERNATIVES = 256


class GlobError(ValueError):
    """A pattern that cannot be matched: it expands to more than MAX_ALTERNATIVES
    alternatives, or holds a class that is not one (`[z-a]`)."""


@dataclass(frozen=True, slots=True)
class _Piece:
    """A star-free run of single-character matchers: a regex of fixed width."""

    regex: re.Pattern[str]
    width: int


@dataclass(frozen=True, slots=True)
class _Segment:
    """One segment of a pattern: its pieces between stars (one piece: no star)."""

    pieces: tuple[_Piece, ...]
    fixed: int
    """The width the pieces take together: a shorter name cannot match."""

    def match(self, name: str) -> bool:
        first = self.pieces[0]
        if len(self.pieces) == 1:
            return first.regex.fullmatch(name) is not None
        if len(name) < self.fixed or first.regex.match(name) is None:
            return False
        last = self.pieces[-1]
        end = len(name) - last.width
        if last.regex.fullmatch(name, end) is None:
            return False
        pos = first.width
        for piece in self.pieces[1:-1]:
            found = piece.regex.search(name, pos, end)
            if found is None:
                return False
            pos = found.end()
        return True


@dataclass(frozen=True, slots=True)
class _Alternative:
    """One alternative of a pattern: its runs of plain segments, split at each `**` (one
    run: no `**`, the path has exactly that many names)."""

    runs: tuple[tuple[_Segment, ...], ...]
    fixed: int
    """How many names the runs take together: a shorter path cannot match."""

    def match(self, names: list[str]) -> bool:
        runs = self.runs
        first = runs[0]
        if len(runs) == 1:
            return len(first) == len(names) and all(
                s.match(n) for s, n in zip(first, names, strict=True)
            )
        if len(names) < self.fixed:
            return False
        if not all(s.match(n) for s, n in zip(first, names, strict=False)):
            return False
        last = runs[-1]
        tail_start = len(names) - len(last)
        if not all(s.match(n) for s, n in zip(last, names[tail_start:], strict=True)):
            return False
        pos = len(first)
        for run in runs[1:-1]:
            found = _find_run(run, names, pos, tail_start)
            if found is None:
                return False
            pos = found + len(run)
        return True


@dataclass(frozen=True, slots=True)
class PathGlob:
    """A compiled glob (`compile_glob`); `match` says whether a whole relative path
    matches it."""

    pattern: str
    alternatives: tuple[_Alternative, ...]

    def match(self, path: str) -> bool:
        names = path.split("/")
        return any(alternative.match(names) for alternative in self.alternatives)


@lru_cache(maxsize=1024)
def compile_glob(pattern: str) -> PathGlob:
    """`pattern` compiled (see the module's syntax). Raises GlobError past
    MAX_ALTERNATIVES alternatives, or for a class that is not one."""
    try:
        alternatives = tuple(_alternative(text) for text in _expand_braces(pattern))
    except re.error as exc:
        raise GlobError(f"{pattern!r} is not a valid glob: {exc}") from None
    return PathGlob(pattern, alternatives)


def _find_run(run: tuple[_Segment, ...], names: list[str], start: int, end: int) -> int | None:
    """The leftmost index from `start` where `run` matches consecutive names before `end`."""
    for at in range(start, end - len(run) + 1):
        if all(s.match(n) for s, n in zip(run, names[at : at + len(run)], strict=True)):
            return at
    return None


def _expand_braces(pattern: str) -> list[str]:
    """Every alternative `{a,b}` spells (the first `}` after a `{` closes it; a `{` without
    one, or inside a class, or escaped, is literal)."""
    done: list[str] = []
    pending = [pattern]
    while pending:
        text = pending.pop()
        brace = _first_brace(text)
        if brace is None:
            done.append(text)
        else:
            start, end = brace
            head, tail = text[:start], text[end + 1 :]
            pending.extend(f"{head}{option}{tail}" for option in text[start + 1 : end].split(","))
        if len(done) + len(pending) > MAX_ALTERNATIVES:
            raise GlobError(
                f"{pattern!r} spells more than {MAX_ALTERNATIVES} alternatives with its braces"
            )
    done.reverse()
    return done


def _first_brace(text: str) -> tuple[int, int] | None:
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            end = _class_end(text, i)
            if end is not None:
                i = end + 1
                continue
        if c == "{":
            end = text.find("}", i)
            if end != -1:
                return i, end
        i += 1
    return None


def _class_end(text: str, i: int) -> int | None:
    end = text.find("]", i + 2 if text[i + 1 : i + 2] in ("!", "^") else i + 1)
    return None if end == -1 or end == i + 1 else end


def _alternative(text: str) -> _Alternative:
    runs: list[list[_Segment]] = [[]]
    segments = text.split("/")
    for index, segment in enumerate(segments):
        if segment != "**":
            runs[-1].append(_segment(segment))
        elif index == len(segments) - 1:
            # Ending the pattern, `**` names one or more entries: a name, then any more.
            runs[-1].append(_segment("*"))
            runs.append([])
        elif runs[-1] or len(runs) == 1:  # a run of `**`s is one
            runs.append([])
    return _Alternative(tuple(tuple(run) for run in runs), sum(len(run) for run in runs))


def _segment(text: str) -> _Segment:
    pieces: list[list[str]] = [[]]
    i = 0
    while i < len(text):
        c = text[i]
        if c == "*":
            while i < len(text) and text[i] == "*":
                i += 1
            pieces.append([])
            continue
        if c == "?":
            pieces[-1].append("[^/]")
        elif c == "[" and (end := _class_end(text, i)) is not None:
            body = text[i + 1 : end]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("^", "\\^")
            pieces[-1].append(f"[{'^/' if negate else ''}{body}]")
            i = end + 1
            continue
        elif c == "\\" and i + 1 < len(text):
            pieces[-1].append(re.escape(text[i + 1]))
            i += 2
            continue
        else:
            pieces[-1].append(re.escape(c))
        i += 1
    return _Segment(
        tuple(_Piece(re.compile("".join(tokens), re.DOTALL), len(tokens)) for tokens in pieces),
        sum(len(tokens) for tokens in pieces),
    )
