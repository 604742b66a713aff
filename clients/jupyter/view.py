"""One turn as a notebook cell shows it, folded from a snapshot and the events after it.

The rules are the snapshot's (see docs/clients.md, "render from state"): `item_started` adds
an item, `item_delta` appends to its text (a tool call's to its output), `item_completed`
replaces it, `approval_requested` and `approval_resolved` add and remove pending approvals,
`turn_completed` ends the turn. A reply that completes `superseded` is dropped (its retry's
reply follows). Events of other turns change nothing. Folding is idempotent for items: an item
seen again (a replay after a resync that overlaps) replaces itself, so nothing shows twice.
"""

from dataclasses import dataclass, field

import msgspec

from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
    TurnCompleted,
    TurnStatus,
)
from tether.protocol.items import AgentMessage, AnyItem, Reasoning, ToolCall
from tether.protocol.session import SessionSnapshot, TurnSnapshot


@dataclass
class TurnView:
    """What is known of one turn: its items in order, whether and how it ended, what waits."""

    session_id: str
    turn_id: str
    items: dict[str, AnyItem] = field(default_factory=dict[str, AnyItem])
    status: TurnStatus = "running"
    error: str = ""
    pending: dict[str, ApprovalRequest] = field(default_factory=dict[str, ApprovalRequest])
    resolved: list[str] = field(default_factory=list[str])
    """What happened to the approvals answered while this view followed the turn, one line
    each (`allowed by tether-cli`)."""
    queued: dict[str, str] = field(default_factory=dict[str, str])
    """Messages queued to join the turn at its next step, by input id."""
    retry: str = ""
    """The model call being retried, while it waits."""
    note: str = ""
    """What the cell says under the turn: why it stopped following (detached, connection
    lost, waiting for an approval)."""

    @property
    def running(self) -> bool:
        return self.status == "running"

    @classmethod
    def from_snapshot(cls, snapshot: SessionSnapshot, turn: TurnSnapshot) -> "TurnView":
        """The view of `turn` as `snapshot` holds it, its pending approvals included."""
        view = cls(session_id=snapshot.session.id, turn_id=turn.id)
        view.reload(snapshot, turn)
        return view

    def reload(self, snapshot: SessionSnapshot, turn: TurnSnapshot) -> None:
        """Take the turn's state from `snapshot` (a re-attach that could not replay), keeping
        what this view saw answered and its note."""
        self.status = turn.status
        self.items = {item.id: item for item in turn.items}
        self.error = turn.error.message if turn.error is not None else ""
        self.pending = {a.id: a for a in snapshot.pending_approvals if a.turn_id == turn.id}
        running = turn.status == "running"
        self.queued = {q.input_id: q.text for q in snapshot.queued_inputs} if running else {}
        self.retry = ""

    def apply(self, event: AnyEvent) -> bool:
        """Fold `event` in; whether it was this turn's (and so may change what is shown)."""
        if getattr(event, "turn_id", self.turn_id) != self.turn_id:
            return False
        match event:
            case ItemStarted(item=item) | ItemCompleted(item=item):
                self.retry = ""
                if isinstance(item, AgentMessage) and item.superseded:
                    self.items.pop(item.id, None)
                else:
                    self.items[item.id] = item
                self.queued.pop(item.id, None)  # a queued message joined the turn
            case ItemDelta(item_id=item_id, delta=delta):
                self._append(item_id, delta)
            case ApprovalRequested(approval=approval):
                self.pending[approval.id] = approval
            case ApprovalResolved(approval_id=approval_id, decision=decision, by=by):
                approval = self.pending.pop(approval_id, None)
                if approval is not None:
                    verb = "allowed" if decision == "allow" else "denied"
                    self.resolved.append(f"{approval.tool} {verb} by {by}")
            case InputQueued(input_id=input_id, text=text):
                self.queued[input_id] = text
            case ModelRetry(attempt=attempt, max_attempts=most, delay_seconds=delay, reason=why):
                self.retry = f"retrying in {delay:.0f} s ({attempt}/{most}): {why}"
            case TurnCompleted(status=status, error=error):
                self.status = status
                self.error = error.message if error is not None else ""
                self.pending.clear()
                self.queued.clear()
                self.retry = ""
            case _:
                return False
        return True

    def _append(self, item_id: str, delta: str) -> None:
        item = self.items.get(item_id)
        match item:
            case AgentMessage() | Reasoning():
                self.items[item_id] = msgspec.structs.replace(item, text=item.text + delta)
            case ToolCall():
                self.items[item_id] = msgspec.structs.replace(item, output=item.output + delta)
            case _:
                pass


def last_turn(snapshot: SessionSnapshot) -> TurnSnapshot | None:
    """The turn a re-attached cell shows: the running one, else the last."""
    running = [turn for turn in snapshot.turns if turn.status == "running"]
    if running:
        return running[-1]
    return snapshot.turns[-1] if snapshot.turns else None
