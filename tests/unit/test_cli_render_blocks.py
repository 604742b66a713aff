"""Where streamed Markdown is cut: only at blank lines that end a block for good."""

import pytest

from tether.clients.cli.render.blocks import open_block_start


@pytest.mark.parametrize(
    ("text", "open_block"),
    [
        ("para one\nstill one\n\nnext para\n", "next para\n"),
        ("para\n\nnext, still arriving", "para\n\nnext, still arriving"),  # wait for the line
        ("```\ncode\n\nmore code\n```\n\nafter\n", "after\n"),  # blank lines inside a fence
        ("```\ncode\n\nmore code\n", "```\ncode\n\nmore code\n"),  # the fence is open
        ("- a\n\n- b\n\n  continued\n\nnew\n", "new\n"),  # a loose list stays one block
        ("1. a\n\n2. b\n", "1. a\n\n2. b\n"),
        ("para\n\n    indented code\n", "para\n\n    indented code\n"),
        ("# Title\n\n", "# Title\n\n"),
    ],
)
def test_the_open_block(text: str, open_block: str) -> None:
    assert text[open_block_start(text) :] == open_block


def test_it_goes_on_from_where_the_last_cut_was() -> None:
    text = "one\n\ntwo\n\nthree\n"
    first = open_block_start(text[:9])
    assert text[first:9] == "two\n"
    assert text[open_block_start(text, first) :] == "three\n"
