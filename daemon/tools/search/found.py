"""What a search found, before formatting: the `Found` both engines fill, so that one
formatting serves them both."""

import bisect
from collections.abc import Callable

from tether.daemon.tools.search.query import OutputMode

Line = tuple[int, bool, str]
"""(line number, is a match, text)"""


class Found:
    """What a search found, before formatting. Content mode keeps the lines of only as many
    files (in path order) as the limit needs, so memory stays bounded however much matched.
    Files for which `hidden` is true are dropped as they arrive."""

    def __init__(
        self, mode: OutputMode, limit: int, *, hidden: Callable[[str], bool] | None = None
    ) -> None:
        self.mode = mode
        self.limit = limit
        self.hidden = hidden
        self.counts: dict[str, int] = {}
        """Files with matches → matching lines (0 when unknown: files mode)."""
        self.total_matches = 0
        self._kept: list[str] = []
        self._kept_counts: dict[str, int] = {}
        self._kept_matches = 0
        self.lines: dict[str, list[Line]] = {}
        self.stopped_after: float | None = None
        """The time limit the search hit (results are partial), if it did."""

    def add_file(self, path: str, count: int) -> None:
        if self.hidden is not None and self.hidden(path):
            return
        self.counts[path] = self.counts.get(path, 0) + count
        self.total_matches += count

    def add_block(self, path: str, matches: int, lines: Callable[[], list[Line]]) -> None:
        """A file's lines in content mode; `lines` is called only if they may be shown."""
        if not matches or (self.hidden is not None and self.hidden(path)):
            return
        self.add_file(path, matches)
        if path in self.lines:
            self.lines[path].extend(lines())
            self._kept_counts[path] += matches
            self._kept_matches += matches
            return
        if self._kept and self._kept_matches >= self.limit and path > self._kept[-1]:
            return
        bisect.insort(self._kept, path)
        self.lines[path] = lines()
        self._kept_counts[path] = matches
        self._kept_matches += matches
        # Drop the last files while the others still reach the limit.
        while len(self._kept) > 1:
            last = self._kept[-1]
            if self._kept_matches - self._kept_counts[last] < self.limit:
                break
            self._kept.pop()
            del self.lines[last]
            self._kept_matches -= self._kept_counts.pop(last)
