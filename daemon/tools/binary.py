"""The binary-file rule every reader of the user's files shares (read_file, edit_file, grep's
Python search, mentions): a file whose first 8 KiB hold a NUL byte is binary, as git and
ripgrep judge it."""

SNIFF_BYTES = 8192
"""How much of a file's head the rule looks at."""


def is_binary(head: bytes | str) -> bool:
    """True if `head` (a file's content, or at least its first `SNIFF_BYTES`) looks binary;
    text that arrived decoded (an editor's attachment) is judged by the same rule."""
    if isinstance(head, str):
        return "\0" in head[:SNIFF_BYTES]
    return b"\0" in head[:SNIFF_BYTES]
