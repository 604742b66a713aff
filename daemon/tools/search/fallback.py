"""The pure-Python search, for when ripgrep is not available: the same files and the same
results as ripgrep where it can (hidden files searched; dependency/cache/VCS folders, what the
ignore files exclude, and binary files skipped; a glob wins over the ignore files for the files
it names), but it skips files over 1 MB, refuses risky regexes (`regex_safety`), and does not
read ignore files above the workspace or the user's global gitignore."""

import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tether.daemon.beneath import read_beneath
from tether.daemon.tools.binary import is_binary
from tether.daemon.tools.filetree import GitignorePattern, relative, rules_for, walk_files
from tether.daemon.tools.read_file import split_lines
from tether.daemon.tools.search.found import Found, Line
from tether.daemon.tools.search.query import Query
from tether.daemon.tools.search.regex_safety import compile_fallback

FALLBACK_MAX_FILE_BYTES = 1024 * 1024


def search_python(
    root: Path,
    start: Path,
    params: Query,
    time_limit: float,
    stop: threading.Event,
    hidden: Callable[[str], bool] | None = None,
) -> Found:
    """The fallback, run in a worker thread: stops after `time_limit` seconds or when `stop`
    is set, with partial results; leaves out the files for which `hidden` is true."""
    deadline = time.monotonic() + time_limit
    regex = compile_fallback(params.pattern, params.case_insensitive)
    found = Found(params.output_mode, params.head_limit, hidden=hidden)
    if start.is_file():  # named explicitly: searched whatever the ignore files and glob say
        with contextlib.suppress(OSError):
            data, _ = read_beneath(root, start)
            _search_file(data, relative(root, start), regex, params, found)
        return found
    user_glob = GitignorePattern(params.glob) if params.glob else None
    rules = rules_for(root, start)
    for rel, file, ignored in walk_files(root, start, build=False, ignore=rules):
        if stop.is_set() or time.monotonic() > deadline:
            found.stopped_after = time_limit
            break
        if user_glob is not None:
            hit = user_glob.matches(rel, False)
            if user_glob.negated:
                if hit or ignored:
                    continue
            elif not hit:
                continue
        elif ignored:
            continue
        if hidden is not None and hidden(rel):
            continue  # not even read
        try:
            # Opened relative to its folder's descriptor, never through a symlink; a file
            # over the limit is skipped unread.
            data = file.read(limit=FALLBACK_MAX_FILE_BYTES)
        except OSError:
            continue
        _search_file(data, rel, regex, params, found)
    return found


def _search_file(
    data: bytes, rel: str, regex: re.Pattern[str], params: Query, found: Found
) -> None:
    if is_binary(data):
        return
    text = data.decode("utf-8", "replace")
    if regex.search(text.replace("\r\n", "\n") if "\r" in text else text) is None:
        return
    lines = split_lines(text)
    if params.output_mode == "files":
        if any(regex.search(line) for line in lines):
            found.add_file(rel, 0)
        return
    matches = [i for i, line in enumerate(lines) if regex.search(line)]
    if not matches:
        return
    if params.output_mode == "count":
        found.add_file(rel, len(matches))
        return

    def window() -> list[Line]:
        shown: set[int] = set()
        for i in matches:
            start, end = max(0, i - params.context), min(len(lines), i + params.context + 1)
            shown.update(range(start, end))
        hits = set(matches)
        return [(i + 1, i in hits, lines[i]) for i in sorted(shown)]

    found.add_block(rel, len(matches), window)
