"""Merging the `item_delta`s a client has not yet been sent.

A client that falls behind (its connection's outbox holds frames it has not read) would
otherwise be sent every delta of a long answer one by one, thousands of frames for text it
will only see joined. Instead, while deltas wait, consecutive ones of the same item become one:

- Only consecutive frames merge: a delta joins the frame queued right before it when that one
  holds deltas of the same item of the same session, and of the same kind (text, or a
  `progress` report). Any other frame in between ends the run, so the order of everything
  the client sees is the order of the events.
- The merged event is one `item_delta` whose `delta` is the texts joined in order and whose
  `progress` is the last one reported (the latest report stands). Text and progress deltas
  are never merged together: a delta with both would be one some clients read only in part.
- Its `session/event` carries the `seq` of the last delta it holds and `first_seq` the seq
  of the first: it stands for the events `first_seq..seq`, and a client's cursor after it is
  `seq`. A frame of a single delta is sent as it was encoded, without `first_seq`.

A frame is merged only while it waits; a client that keeps up gets each delta as emitted.
"""

from collections.abc import Sequence

from tether.protocol.events import ItemDelta
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import SessionEventParams


class DeltaFrame:
    """One live `item_delta`, encoded once for all subscribers, and what merging it needs."""

    __slots__ = ("epoch", "event", "frame", "key", "seq", "session_id", "weight")

    def __init__(
        self, frame: bytes, *, session_id: str, epoch: str, seq: int, event: ItemDelta
    ) -> None:
        self.frame = frame
        self.session_id = session_id
        self.epoch = epoch
        self.seq = seq
        self.event = event
        self.key = (session_id, epoch, event.turn_id, event.item_id, event.progress is None)
        """Deltas of equal keys merge."""
        self.weight = len(event.delta.encode())
        """About the bytes it adds to a merged frame (its text; JSON escapes may add a few)."""


def merged_frame(run: Sequence[DeltaFrame]) -> bytes:
    """One `session/event` frame for `run`, consecutive deltas of one key in seq order."""
    first, last = run[0], run[-1]
    if len(run) == 1:
        return first.frame
    event = ItemDelta(
        turn_id=first.event.turn_id,
        item_id=first.event.item_id,
        delta="".join(part.event.delta for part in run),
        progress=last.event.progress,
    )
    params = SessionEventParams(
        session_id=first.session_id,
        epoch=first.epoch,
        seq=last.seq,
        first_seq=first.seq,
        event=event,
    )
    return notification_frame("session/event", params)
