"""The text the model reads from a search, the same whichever engine ran:

    files    `path` per line
    count    `path:N` per line (N: matching lines)
    content  `path:N:line` for matches, `path-N-line` for context lines, `--` between groups

Paths are sorted; results are cut at the limit (files, or matching lines in content mode) with
a note saying how many there were, and lines at `MAX_LINE_CHARS`."""

from tether.daemon.tools.search.found import Found
from tether.daemon.tools.search.query import MAX_HEAD_LIMIT

MAX_LINE_CHARS = 500


def _cut(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}… [line cut at {MAX_LINE_CHARS} characters]"


def format_found(found: Found, context: int, pattern: str, shown: str) -> str:
    limit = found.limit
    files = sorted(found.counts)
    out: list[str] = []
    if not files and not found.total_matches:
        where = "the workspace" if shown == "." else shown
        out.append(f"No matches for {pattern!r} in {where}.")
    elif found.mode == "files":
        out.extend(files[:limit])
        if len(files) > limit:
            out.append(_more(limit, len(files), "files"))
    elif found.mode == "count":
        out.extend(f"{path}:{found.counts[path]}" for path in files[:limit])
        if len(files) > limit:
            out.append(_more(limit, len(files), "files"))
    else:
        out.extend(_content_lines(found, context))
        if found.total_matches > limit:
            out.append(_more(limit, found.total_matches, "matching lines"))
    if found.stopped_after is not None:
        out.append(
            f"(the search stopped after {found.stopped_after:g} s, so results are incomplete; "
            "narrow the path, glob or pattern)"
        )
    return "\n".join(out)


def _more(shown: int, total: int, what: str) -> str:
    return (
        f"(showing {shown} of {total} {what}; narrow the search or raise head_limit, at most "
        f"{MAX_HEAD_LIMIT})"
    )


def _content_lines(found: Found, context: int) -> list[str]:
    out: list[str] = []
    left = found.limit
    for path in sorted(found.lines):
        if left <= 0:
            break
        last_match = None
        previous = None
        for number, is_match, text in sorted(found.lines[path]):
            if left <= 0 and (is_match or last_match is None or number > last_match + context):
                break
            if context and previous is not None and number != previous + 1:
                out.append("--")
            if context and previous is None and out:
                out.append("--")
            sep = ":" if is_match else "-"
            out.append(f"{path}{sep}{number}{sep}{_cut(text)}")
            previous = number
            if is_match:
                last_match = number
                left -= 1
    return out
