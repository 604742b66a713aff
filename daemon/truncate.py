"""Cutting long text for the model: keep the head and the tail, say what was cut in between.

The end of an output (a stack trace, a test summary, the last lines of a log) usually matters
most, so the tail gets the larger share: `cap_result` keeps 40% head and 60% tail. Both helpers
return text no longer than the budget they are given, marker included.
"""

HEAD_SHARE = 0.4


def cut_marker(cut: int) -> str:
    """The line that stands where `cut` characters were removed."""
    return f"\n\n[… {cut:,} characters cut here …]\n\n"


def middle_truncate(text: str, head: int, tail: int) -> str:
    """`text` unchanged if it fits in `head + tail` characters; otherwise its first `head` and
    last `tail` characters (each shortened a little to make room for the marker) around a marker
    saying how many characters were cut. The result is at most `head + tail` characters."""
    budget = head + tail
    if len(text) <= budget:
        return text
    room = budget - len(cut_marker(len(text)))
    if room <= 0:
        return text[:budget]
    keep_head = round(room * head / budget)
    keep_tail = room - keep_head
    cut = len(text) - keep_head - keep_tail
    tail_text = text[len(text) - keep_tail :] if keep_tail else ""
    return text[:keep_head] + cut_marker(cut) + tail_text


def cap_result(text: str, limit: int) -> str:
    """`text` capped at `limit` characters: the head (40%) and the tail (60%) are kept."""
    head = round(limit * HEAD_SHARE)
    return middle_truncate(text, head, limit - head)
