"""Session events: every change to a session is one event, numbered by `seq` within an `epoch`.

Rules every client can rely on:
- `seq` increases by exactly one per event within an epoch (no gaps, no repeats).
- The `epoch` is a random id that changes whenever continuity is lost (a daemon restart); a
  client holding a cursor from another epoch gets a snapshot instead of a replay.
- Completed items and state changes are persisted; `item_delta`s live only in a bounded
  in-memory ring, which is why a cursor that the ring no longer reaches also gets a snapshot.
"""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.items import AnyItem

TurnStatus = Literal["running", "completed", "failed", "cancelled", "interrupted", "paused"]


class Usage(Wire, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0


class TurnError(Wire, frozen=True, kw_only=True):
    """Why a turn failed, written for the person reading it: what happened and what to do."""

    code: str
    message: str


class Event(Wire, frozen=True, kw_only=True, tag_field="type"):
    pass


class TurnStarted(Event, frozen=True, kw_only=True, tag="turn_started"):
    turn_id: str
    started_at: float


class ItemStarted(Event, frozen=True, kw_only=True, tag="item_started"):
    turn_id: str
    item: AnyItem


class ItemDelta(Event, frozen=True, kw_only=True, tag="item_delta"):
    """Text appended to a running item: assistant text, reasoning, or command output."""

    turn_id: str
    item_id: str
    delta: str


class ItemCompleted(Event, frozen=True, kw_only=True, tag="item_completed"):
    turn_id: str
    item: AnyItem


class TurnCompleted(Event, frozen=True, kw_only=True, tag="turn_completed"):
    turn_id: str
    status: TurnStatus
    ended_at: float
    usage: Usage = Usage()
    error: TurnError | None = None


class SessionRenamed(Event, frozen=True, kw_only=True, tag="session_renamed"):
    title: str


AnyEvent = TurnStarted | ItemStarted | ItemDelta | ItemCompleted | TurnCompleted | SessionRenamed

EPHEMERAL_EVENTS: tuple[type[Event], ...] = (ItemDelta,)
"""Events kept only in the in-memory ring, never persisted."""
