"""Positions: LSP `character` offsets in the server's units become code-point columns."""

import pytest

from tether.daemon.lsp.diagnostics import character_to_column


@pytest.mark.parametrize(
    ("line", "character", "encoding", "column"),
    [
        ("x = 1", 4, "utf-16", 5),
        ('s = "😀"; x', 10, "utf-16", 10),  # the emoji is two UTF-16 units
        ('s = "😀"; x', 9, "utf-32", 10),
        ('s = "😀"; x', 12, "utf-8", 10),  # and four UTF-8 bytes
        ("é = 1", 4, "utf-16", 5),
        ("", 3, "utf-16", 4),
        ("abc", 0, "utf-16", 1),
    ],
)
def test_character_offsets_become_code_point_columns(
    line: str, character: int, encoding: str, column: int
) -> None:
    assert character_to_column(line, character, encoding) == column
