"""A turn's sink: what the turn loop reports (items, deltas, notices, retries) as events of the
session, and what it asks of the session (the queued messages, the open todos)."""

import msgspec

from tether.daemon.sessions.loaded import LoadedSession
from tether.daemon.sessions.session import new_id
from tether.protocol.enums import NoticeCode
from tether.protocol.events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ItemUpdated,
    ModelRetry,
    ToolProgress,
)
from tether.protocol.items import AnyItem, Notice, NoticeLevel
from tether.protocol.session import QueuedInput


class Sink:
    """Routes one turn's items into its session's event stream."""

    def __init__(self, live: LoadedSession, turn_id: str) -> None:
        self.live = live
        self.session = live.session
        self.turn_id = turn_id

    def item_started(self, item: AnyItem) -> None:
        self.session.emit(ItemStarted(turn_id=self.turn_id, item=item))

    def item_delta(self, item_id: str, delta: str) -> None:
        self.session.emit(ItemDelta(turn_id=self.turn_id, item_id=item_id, delta=delta))

    def item_progress(self, item_id: str, progress: ToolProgress) -> None:
        """How far the running tool call `item_id` has got: a delta without text."""
        self.session.emit(
            ItemDelta(turn_id=self.turn_id, item_id=item_id, delta="", progress=progress)
        )

    def item_completed(self, item: AnyItem) -> None:
        self.session.emit(ItemCompleted(turn_id=self.turn_id, item=item))

    def item_updated(self, item: AnyItem) -> None:
        self.session.emit(ItemUpdated(turn_id=self.turn_id, item=item))

    def notice(self, level: NoticeLevel, code: NoticeCode, message: str) -> None:
        item = Notice(id=new_id("i"), level=level, code=code, message=message)
        self.item_started(item)
        self.item_completed(item)

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        self.session.emit(
            ModelRetry(
                turn_id=self.turn_id,
                attempt=attempt,
                max_attempts=max_attempts,
                delay_seconds=round(delay, 2),
                reason=reason,
            )
        )

    def take_queued(self) -> list[QueuedInput]:
        # The loop puts every entry into the history as soon as this returns, so this is where
        # changed instructions go with the first of them. The user message items that join
        # them (same ids) take them off the queue.
        return [
            msgspec.structs.replace(entry, context=self.live.with_instructions(entry.context))
            for entry in self.session.queued_inputs.values()
        ]

    def open_todos(self) -> list[str]:
        return [t.content for t in self.session.todos if t.status != "completed"]
