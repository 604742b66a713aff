"""Middle truncation: a text read only at both ends is cut exactly as the whole text would be."""

import re

from tether.daemon.truncate import cap_ends, cap_result, join_ends, middle_truncate


def text_of(length: int) -> str:
    return "".join(chr(ord("a") + i % 26) for i in range(length))


def test_a_text_known_by_its_ends_is_cut_as_the_whole_text() -> None:
    for length in (101, 1_000, 12_345, 100_000):
        whole = text_of(length)
        start, end = whole[:5_000], whole[-5_000:]
        for head, tail in ((40, 60), (1_000, 3_000), (13, 7)):
            if length <= head + tail:
                continue
            cut = join_ends(start, end, length, head, tail)
            assert cut == middle_truncate(whole, head, tail)
            assert len(cut) <= head + tail
        for limit in (100, 1_999, 6_000):
            if length <= limit:
                continue
            assert cap_ends(start, end, length, limit) == cap_result(whole, limit)


def test_the_marker_counts_what_was_cut() -> None:
    whole = text_of(10_000)
    cut = cap_result(whole, 1_000)
    found = re.search(r"\n\n\[… ([\d,]+) characters cut here …\]\n\n", cut)
    assert found is not None
    head, tail = cut[: found.start()], cut[found.end() :]
    assert whole.startswith(head)
    assert whole.endswith(tail)
    assert len(head) + len(tail) + int(found[1].replace(",", "")) == 10_000
    assert len(cut) <= 1_000
    assert len(tail) > len(head)


def test_a_budget_smaller_than_the_marker_keeps_the_head() -> None:
    assert middle_truncate(text_of(1_000), 5, 5) == text_of(10)
    assert join_ends("abcdefghij", "", 1_000, 5, 5) == "abcdefghij"
