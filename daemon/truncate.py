"""Cutting long text for the model: keep the head and the tail, say what was cut in between.

The end of an output (a stack trace, a test summary, the last lines of a log) usually matters
most, so the tail gets the larger share: `cap_result` keeps 40% head and 60% tail. Every helper
returns text no longer than the budget it is given, marker included; `join_ends` and
`cap_ends` cut a text read only at both ends (a large file) the same way.
"""

HEAD_SHARE = 0.4


def cut_marker(cut: int) -> str:
    """The line that stands where `cut` characters were removed."""
    return f"\n\n[… {cut:,} characters cut here …]\n\n"


def middle_truncate(text: str, head: int, tail: int) -> str:
    """`text` unchanged if it fits in `head + tail` characters; otherwise its first `head` and
    last `tail` characters (each shortened a little to make room for the marker) around a marker
    saying how many characters were cut. The result is at most `head + tail` characters."""
    if len(text) <= head + tail:
        return text
    return join_ends(text, text, len(text), head, tail)


def join_ends(start: str, end: str, length: int, head: int, tail: int) -> str:
    """A text of `length` characters, longer than `head + tail`, known only by its `start` and
    its `end` (at least `head` and `tail` characters of each; the whole text in both will do),
    cut as `middle_truncate` cuts it: at most `head + tail` characters, marker included."""
    budget = head + tail
    room = budget - len(cut_marker(length))
    if room <= 0:
        return start[:budget]
    keep_head = round(room * head / budget)
    keep_tail = room - keep_head
    cut = length - keep_head - keep_tail
    tail_text = end[len(end) - keep_tail :] if keep_tail else ""
    return start[:keep_head] + cut_marker(cut) + tail_text


def cap_result(text: str, limit: int) -> str:
    """`text` capped at `limit` characters: the head (40%) and the tail (60%) are kept."""
    head = round(limit * HEAD_SHARE)
    return middle_truncate(text, head, limit - head)


def cap_ends(start: str, end: str, length: int, limit: int) -> str:
    """`cap_result` for a text longer than `limit` known only by its `start` and `end` (see
    `join_ends`)."""
    head = round(limit * HEAD_SHARE)
    return join_ends(start, end, length, head, limit - head)
