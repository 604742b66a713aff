"""The in-memory ring of recent event frames, for exact replay to clients that reconnect.

Each event is encoded to its `session/event` notification frame once, when it is emitted; the
same bytes go to every subscriber and into the ring. The ring is bounded by bytes: when a
client's cursor is older than the oldest frame it holds, that client gets a snapshot instead.
Each frame is marked when it is an `item_delta`, so that a client that takes no deltas is
replayed the rest.
"""

from collections import deque
from itertools import islice

DEFAULT_RING_BYTES = 8 * 1024 * 1024


class EventRing:
    def __init__(self, first_seq: int, max_bytes: int = DEFAULT_RING_BYTES) -> None:
        self._frames: deque[tuple[int, bytes, bool]] = deque()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._first_seq = first_seq
        """The seq of the oldest event the ring still holds (or would hold next)."""

    def append(self, seq: int, frame: bytes, *, delta: bool = False) -> None:
        self._frames.append((seq, frame, delta))
        self._bytes += len(frame)
        while self._bytes > self._max_bytes and len(self._frames) > 1:
            _, old, _ = self._frames.popleft()
            self._bytes -= len(old)
            self._first_seq = self._frames[0][0]

    def since(self, seq: int, *, deltas: bool = True) -> list[bytes] | None:
        """The frames of every event after `seq` (without the `item_delta`s unless `deltas`),
        or None if the ring no longer reaches back."""
        if seq + 1 < self._first_seq:
            return None
        if not self._frames:
            return []
        start = max(0, seq + 1 - self._frames[0][0])
        return [
            frame for _, frame, delta in islice(self._frames, start, None) if deltas or not delta
        ]

    def statistics(self) -> tuple[int, int]:
        """(frames held, bytes held)."""
        return len(self._frames), self._bytes
