"""What a search is asked: the fields of grep's params that the engines and the formatting
read, as a protocol, so the engines do not depend on the tool."""

from typing import Literal, Protocol

OutputMode = Literal["files", "content", "count"]

MAX_HEAD_LIMIT = 500
"""The most results a search may ask for."""


class Query(Protocol):
    @property
    def pattern(self) -> str: ...
    @property
    def glob(self) -> str | None: ...
    @property
    def output_mode(self) -> OutputMode: ...
    @property
    def case_insensitive(self) -> bool: ...
    @property
    def context(self) -> int:
        """Lines of context around each match (content mode)."""
        ...

    @property
    def head_limit(self) -> int:
        """Results to show: files, or matching lines in content mode."""
        ...
