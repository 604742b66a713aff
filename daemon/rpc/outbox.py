"""A connection's outbound queue, bounded in bytes: frames wait here until the connection's
writer has written them to the socket.

One budget, `max_bytes`, covers everything held for one client: queued frames and the batch
being written, whether responses, replays, live session events or daemon broadcasts. Frames are
kept as the bytes they were encoded to, and an event (or broadcast) is encoded once for all its
subscribers, so the budget is what this one client can make the daemon hold, whatever its
reading speed.

- Live session events are *offered*: an offer is refused when the frame would leave less than
  `reserve` bytes of the budget free. The session then drops the subscription and queues a
  `session/resync` notice, for which the reserve keeps room. There is no bound on the number
  of frames: what a backlog costs is its bytes, and a fast model's answer is thousands of
  small frames (a bound of 4,096 frames resynced a client that read continuously).
- A live `item_delta` offered with its `DeltaFrame` that would wait right behind a waiting
  delta of the same item is merged into it (see `tether.daemon.sessions.deltas`): a client
  that falls behind gets the text it missed in a few frames, and its backlog costs about the
  text, not one envelope per delta. A waiting run of deltas is encoded when the writer takes
  it, and counts against the budget with its estimated size until then. A run stops growing
  at `MAX_MERGED_BYTES`.
- Everything else (responses, replays, resync notices, broadcasts) cannot be dropped without the
  client losing track. When such a frame does not fit, the outbox is *overrun*: it empties,
  takes nothing more, and `wait_overrun` returns so that the connection is closed.
- A single frame larger than the budget is still taken when nothing else is held, or a large
  answer could never be sent at all; so is a live frame larger than the part of the budget
  live events may take (the `item_completed` of a long message), if it fits the budget.

With a `DirectWriter` (the connection's websocket), a frame offered or sent while nothing is
queued and no batch is being written goes straight to the socket when the socket takes it
without waiting: no task switch for the writer, which is most of what fanning an event out to
many clients costs. Order is kept: once a frame waits, every later one waits behind it. A
frame the socket took only in part leaves its rest with the writer (at most one frame, outside
the budget), and the connection's writer task is woken to finish it first.
"""

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import trio

from tether.daemon.sessions.deltas import DeltaFrame, merged_frame

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""Bytes held for one client: room for a whole replay of the event ring (8 MiB) plus as much
again for the responses and events around it."""
DEFAULT_RESERVE = 256 * 1024

MAX_MERGED_BYTES = 256 * 1024
"""A run of merged deltas grows to about this size, then the next delta starts another: one
frame stays small enough for any client to parse at once."""

WRITE_BATCH_FRAMES = 256
WRITE_BATCH_BYTES = 1024 * 1024
"""A batch is written with one send: a replay of thousands of events costs a few dozen
syscalls instead of one each, and no single write holds more than about a megabyte."""


class DirectWriter(Protocol):
    def write_nowait(self, payload: bytes) -> bool:
        """Write one frame at once if the socket takes some of it without waiting (the rest,
        if any, is then `has_unsent`); False when nothing was written."""
        ...

    @property
    def has_unsent(self) -> bool:
        """Part of a frame `write_nowait` took is still to be written."""
        ...


@dataclass(frozen=True, slots=True)
class OutboxStatistics:
    frames: int
    """Frames queued or being written."""
    bytes: int
    """Their size."""
    peak_bytes: int
    """The most `bytes` has ever been."""
    max_bytes: int


class _Run:
    """Consecutive deltas of one key waiting in the queue, sent as one frame."""

    __slots__ = ("parts", "size")

    def __init__(self, first: DeltaFrame) -> None:
        self.parts = [first]
        self.size = len(first.frame)
        """What it counts against the budget while it waits."""


def _size(entry: "bytes | _Run") -> int:
    return entry.size if isinstance(entry, _Run) else len(entry)


class Outbox:
    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        reserve: int | None = None,
        direct: DirectWriter | None = None,
    ) -> None:
        self._direct = direct
        self._kicked = False
        """The writer has the rest of a direct write to finish (`get_batch` returns [])."""
        self._frames: deque[bytes | _Run] = deque()
        self._max_bytes = max_bytes
        self._reserve = min(DEFAULT_RESERVE, max_bytes // 8) if reserve is None else reserve
        self._queued_bytes = 0
        self._batch_frames = 0
        self._batch_bytes = 0
        self._peak_bytes = 0
        self._wakeup = trio.Event()
        self._drained: trio.Event | None = None
        self._overrun = trio.Event()
        self.closed = False

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def overrun(self) -> bool:
        return self._overrun.is_set()

    def statistics(self) -> OutboxStatistics:
        return OutboxStatistics(
            frames=len(self._frames) + self._batch_frames,
            bytes=self._held(),
            peak_bytes=self._peak_bytes,
            max_bytes=self._max_bytes,
        )

    def replay_room(self) -> int:
        """Bytes a replay may take: half the budget, less what is held. The other half is for
        the events that come while the client reads it (with the default budget, the half is
        the whole replay ring); a client that missed more is sent a snapshot instead."""
        return max(0, self._max_bytes // 2 - self._held())

    def offer(self, frame: bytes, delta: DeltaFrame | None = None) -> bool:
        """Queue a live event frame (`delta`: it is that `item_delta`'s, and may merge with the
        same item's delta waiting before it); False (nothing queued) when it does not fit."""
        if self.closed:
            return True  # a closing connection is detached by its own teardown
        room = self._max_bytes - self._reserve - self._held()
        tail = self._frames[-1] if self._frames else None
        if (
            delta is not None
            and isinstance(tail, _Run)
            and tail.parts[0].key == delta.key
            and tail.size + delta.weight <= MAX_MERGED_BYTES
        ):
            if delta.weight > room:
                return False
            tail.parts.append(delta)
            tail.size += delta.weight
            self._queued_bytes += delta.weight
            self._peak_bytes = max(self._peak_bytes, self._held())
            return True
        if len(frame) > room and (self._held() or len(frame) > self._max_bytes):
            return False
        if not self._write_direct(frame):
            self._append(frame if delta is None else _Run(delta))
        return True

    def send_nowait(self, frame: bytes) -> None:
        """Queue a frame that must reach the client; past the budget, overrun (see above)."""
        if self.closed:
            return
        held = self._held()
        if held and held + len(frame) > self._max_bytes:
            self.close()
            self._overrun.set()
            return
        if not self._write_direct(frame):
            self._append(frame)

    async def get_batch(self) -> list[bytes]:
        """Wait for frames and take the oldest (at most `WRITE_BATCH_FRAMES`, about
        `WRITE_BATCH_BYTES`). They count against the budget until `batch_written`."""
        self.batch_written()
        while not self._frames:
            if self._kicked:
                self._kicked = False
                return []
            if self._drained is not None:
                self._drained.set()
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        batch: list[bytes] = []
        size = 0
        while self._frames and len(batch) < WRITE_BATCH_FRAMES and size < WRITE_BATCH_BYTES:
            entry = self._frames.popleft()
            self._queued_bytes -= _size(entry)
            frame = merged_frame(entry.parts) if isinstance(entry, _Run) else entry
            batch.append(frame)
            size += len(frame)
        self._kicked = False  # the send of this batch writes the rest of a direct write first
        self._batch_frames = len(batch)
        self._batch_bytes = size
        return batch

    def batch_written(self) -> None:
        """The last batch taken is on the socket: release its bytes."""
        self._batch_frames = 0
        self._batch_bytes = 0

    async def wait_drained(self) -> None:
        """Wait until every queued frame has been written (or the outbox closed)."""
        while (self._frames or self._batch_frames) and not self.closed:
            self._drained = trio.Event()
            await self._drained.wait()

    async def wait_overrun(self) -> None:
        """Return once a frame that must be sent did not fit the budget."""
        await self._overrun.wait()

    def close(self) -> None:
        self.closed = True
        self._frames.clear()
        self._queued_bytes = 0
        self._wakeup.set()
        if self._drained is not None:
            self._drained.set()

    def _write_direct(self, frame: bytes) -> bool:
        """Hand `frame` to the direct writer when nothing is ahead of it; True if it took it."""
        direct = self._direct
        if direct is None or self._frames or self._batch_frames or self._kicked:
            return False
        if not direct.write_nowait(frame):
            return False
        if direct.has_unsent:
            self._kicked = True
            self._wakeup.set()
        return True

    def _held(self) -> int:
        return self._queued_bytes + self._batch_bytes

    def _append(self, entry: bytes | _Run) -> None:
        self._frames.append(entry)
        self._queued_bytes += _size(entry)
        self._peak_bytes = max(self._peak_bytes, self._held())
        self._wakeup.set()
