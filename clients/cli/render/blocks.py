"""Where streamed Markdown can be cut: the blocks whose rendering later text cannot change.

A reply streams in pieces; re-rendering all of it on every piece would redraw the screen from
its top. Instead the text is cut into top-level blocks: a block ends at a blank line outside a
fenced code block, once the next complete line starts a new block (it is not indented, so it
does not continue the one before, and it is not the next item of a list that the block
started). Everything before that point is printed once; only the block still open is redrawn.
"""

import re

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


def open_block_start(text: str, start: int = 0) -> int:
    """The offset in `text` where its last open block begins (`start` when none has closed
    after `start`, which must be the start of a block)."""
    cut = start
    block_is_list = False
    first_of_block = True
    fence: str | None = None
    after_blank = False
    position = start
    while True:
        end = text.find("\n", position)
        if end == -1:
            return cut  # the last line is still arriving
        line = text[position:end].rstrip("\r")
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and stripped == fence[0] * len(stripped):
                fence = None
        elif not line.strip():
            after_blank = not first_of_block
        else:
            item = _LIST_ITEM.match(line) is not None
            if after_blank and not line[0].isspace() and not (block_is_list and item):
                cut = position
                first_of_block = True
            if first_of_block:
                block_is_list = item
                first_of_block = False
            after_blank = False
            opening = _FENCE.match(line)
            if opening is not None:
                fence = opening.group(1)
        position = end + 1
