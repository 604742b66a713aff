"""A connection's outbound queue: frames wait here until the connection's writer sends them.

Live events are *offered*: when the queue already holds `limit` frames the offer fails and the
session drops the subscription (the client is told to resync), so a slow client never blocks
the turn or other clients. Responses, replays and resync notices are always queued; they are
bounded by what the client itself asked for.
"""

from collections import deque

import trio

DEFAULT_LIMIT = 4096


class Outbox:
    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._frames: deque[str] = deque()
        self._limit = limit
        self._wakeup = trio.Event()
        self._drained: trio.Event | None = None
        self.sending = False
        self.closed = False

    def __len__(self) -> int:
        return len(self._frames)

    def offer(self, frame: bytes) -> bool:
        if self.closed:
            return True  # a closing connection is detached by its own teardown
        if len(self._frames) >= self._limit:
            return False
        self._frames.append(frame.decode())
        self._wakeup.set()
        return True

    def send_nowait(self, frame: bytes) -> None:
        if self.closed:
            return
        self._frames.append(frame.decode())
        self._wakeup.set()

    async def get_batch(self) -> list[str]:
        """Wait for frames and take all of them, oldest first."""
        self.sending = False
        while not self._frames:
            if self._drained is not None:
                self._drained.set()
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        batch = list(self._frames)
        self._frames.clear()
        self.sending = True
        return batch

    async def wait_drained(self) -> None:
        """Wait until every queued frame has been handed to the socket."""
        while self._frames or self.sending:
            self._drained = trio.Event()
            await self._drained.wait()

    def close(self) -> None:
        self.closed = True
        self._frames.clear()
        self._wakeup.set()
