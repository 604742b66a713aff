"""One session: its state, its event stream and the clients subscribed to it.

Every change goes through `emit`, which, in one synchronous step (so no other task can slip
in between): numbers the event (`seq`, gap-free within the epoch), folds it into the state,
encodes its notification frame once, keeps the frame in the replay ring, queues it for the
store unless it is ephemeral, and offers it to every subscriber. `attach` is synchronous too:
the replay (or snapshot) and the subscription happen with no await between them, which is what
makes "nothing lost, nothing doubled" hold.

A subscriber whose queue is full is dropped and told to resync; it re-attaches with its cursor.
Each `item_delta` is offered with its `DeltaFrame`, so that a subscriber that is behind may
merge it with the same item's delta waiting before it (see `tether.daemon.sessions.deltas`).
A subscriber that attached without deltas is offered no `item_delta`, live or replayed: the
seqs it receives jump over them (see `ClientCapabilities.item_deltas`).
"""

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec

from tether.daemon.sessions.deltas import DeltaFrame
from tether.daemon.sessions.emit_log import open_from_environment
from tether.daemon.sessions.replay import EventRing
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.store import Store
from tether.protocol.events import (
    EPHEMERAL_EVENTS,
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ContextMeter,
    ContextUpdated,
    DiagnosticsReported,
    InputDropped,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ItemUpdated,
    ModelRetry,
    PermissionMode,
    SessionConfigured,
    SessionRenamed,
    TodoEntry,
    TodosUpdated,
    TurnCompleted,
    TurnError,
    TurnStarted,
    TurnStatus,
    Usage,
)
from tether.protocol.items import AgentMessage, AnyItem, Reasoning, ToolCall, UserMessage
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import (
    SessionAttachResult,
    SessionEventParams,
    SessionResyncParams,
)
from tether.protocol.session import (
    Cursor,
    ForkOrigin,
    QueuedInput,
    Role,
    SessionInfo,
    SessionSnapshot,
    SessionState,
    TurnSnapshot,
    WorktreeInfo,
)

_event_encoder = msgspec.json.Encoder()
event_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)

INTERRUPTED_OUTPUT = "[interrupted: the daemon stopped before this tool call finished]"


def state_after(last_turn: str | None) -> SessionState:
    """The state of a session with no running turn whose last turn ended `last_turn` (a
    `TurnStatus`; None: it has had none)."""
    match last_turn:
        case "failed" | "cancelled" | "interrupted" | "paused":
            return last_turn
        case _:
            return "idle"


def fork_origin(row: SessionRow) -> ForkOrigin | None:
    """Where the session of `row` was forked from (None: it was not)."""
    if row.forked_from is None:
        return None
    return ForkOrigin(session_id=row.forked_from, turn_id=row.forked_turn or "")


def root_of(session: "Session", workspace: Path) -> Path:
    """The folder the session's tools, commands and mentions work in: its worktree, else the
    workspace."""
    return workspace if session.worktree is None else Path(session.worktree.root)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


_EMIT_LOG = open_from_environment()
"""Debug only: when each event is emitted (see `tether.daemon.sessions.emit_log`)."""


class Subscriber(Protocol):
    def offer(self, frame: bytes, delta: DeltaFrame | None = None) -> bool:
        """Queue a live event frame; False when the subscriber's queue is full. `delta`: the
        frame is this `item_delta`'s, which may be merged with the same item's deltas waiting
        right before it."""
        ...

    def send_nowait(self, frame: bytes) -> None:
        """Queue a frame regardless of the limit (responses, replays, resync notices)."""
        ...


class TurnState:
    __slots__ = (
        "ended_at",
        "error",
        "id",
        "items",
        "open_items",
        "partial",
        "started_at",
        "status",
        "usage",
    )

    def __init__(self, turn_id: str, started_at: float) -> None:
        self.id = turn_id
        self.status: TurnStatus = "running"
        self.started_at = started_at
        self.ended_at: float | None = None
        self.items: dict[str, AnyItem] = {}
        self.partial: dict[str, list[str]] = {}
        self.open_items: set[str] = set()
        """Items started and not yet completed."""
        self.usage = Usage()
        self.error: TurnError | None = None

    def snapshot(self) -> TurnSnapshot:
        """The turn as it stands, without the text of model calls that broke off and were
        retried (`superseded`): the retry's reply replaced it. The event log keeps it."""
        items: list[AnyItem] = []
        for item_id, item in self.items.items():
            if isinstance(item, AgentMessage | Reasoning) and item.superseded:
                continue
            parts = self.partial.get(item_id)
            items.append(_with_partial(item, "".join(parts)) if parts else item)
        return TurnSnapshot(
            id=self.id,
            status=self.status,
            started_at=self.started_at,
            ended_at=self.ended_at,
            items=items,
            usage=self.usage,
            error=self.error,
        )


def _with_partial(item: AnyItem, text: str) -> AnyItem:
    if isinstance(item, AgentMessage | Reasoning):
        return msgspec.structs.replace(item, text=item.text + text)
    if isinstance(item, ToolCall):
        return msgspec.structs.replace(item, output=item.output + text)
    return item


def worktree_of(row: SessionRow) -> WorktreeInfo | None:
    """The worktree the session of `row` works in (None: the workspace itself)."""
    if row.worktree_root is None:
        return None
    return WorktreeInfo(
        root=row.worktree_root, branch=row.worktree_branch or "", base=row.worktree_base or ""
    )


class Session:
    def __init__(
        self,
        row: SessionRow,
        store: Store,
        *,
        last_seq: int = 0,
        permission_mode: PermissionMode = "edits",
    ) -> None:
        self.id = row.id
        self.title = row.title
        self.forked_from = fork_origin(row)
        self.worktree = worktree_of(row)
        self.created_at = row.created_at
        self.updated_at = row.updated_at
        self.store = store
        self.epoch = secrets.token_hex(8)
        self.seq = last_seq
        self.turns: list[TurnState] = []
        self._turns_by_id: dict[str, TurnState] = {}
        self.ring = EventRing(first_seq=last_seq + 1)
        self.subscribers: dict[Subscriber, Role] = {}
        self._without_deltas: set[Subscriber] = set()
        """Subscribers that attached with `item_deltas=False`."""
        self.on_subscribers: Callable[[], None] = lambda: None
        """Called after the subscribers changed (attach, detach, a subscriber dropped)."""
        self.permission_mode: PermissionMode = permission_mode
        self.model = ""
        """The model chosen for this session's turns; empty: the daemon's configured one."""
        self.subagent_model = ""
        """The model chosen for this session's subagents; empty: the configured one."""
        self.pending_approvals: dict[str, ApprovalRequest] = {}
        self.resolved_approvals: dict[str, ApprovalResolved] = {}
        self.queued_inputs: dict[str, QueuedInput] = {}
        self.session_rules: list[str] = []
        """Permission rules added by "always allow" answers."""
        self.todos: list[TodoEntry] = []
        self.context = ContextMeter()

    # --- loading --------------------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        row: SessionRow,
        store: Store,
        events: list[tuple[int, bytes]],
        *,
        permission_mode: PermissionMode = "edits",
    ) -> "Session":
        """Rebuild a session from its persisted events, in a new epoch. A turn that was still
        running when the last daemon stopped is closed as interrupted (and persisted so)."""
        last_seq = events[-1][0] if events else 0
        session = cls(row, store, last_seq=last_seq, permission_mode=permission_mode)
        for _, body in events:
            session._apply(event_decoder.decode(body))
        for turn in session.turns:
            if turn.status == "running":
                session._interrupt(turn)
        return session

    def _interrupt(self, turn: TurnState) -> None:
        for approval in [a for a in self.pending_approvals.values() if a.turn_id == turn.id]:
            self.deny_for_daemon(approval, "the daemon stopped")
        if self.queued_inputs:
            self.emit(InputDropped(input_ids=list(self.queued_inputs), reason="the daemon stopped"))
        # Streamed text was never persisted: an open message completes with what its started
        # form holds; an open tool call completes as cancelled.
        for item_id in sorted(turn.open_items, key=list(turn.items).index):
            item = turn.items[item_id]
            if isinstance(item, ToolCall):
                item = msgspec.structs.replace(item, status="cancelled", output=INTERRUPTED_OUTPUT)
            self.emit(ItemCompleted(turn_id=turn.id, item=item))
        self.emit(
            TurnCompleted(
                turn_id=turn.id,
                status="interrupted",
                ended_at=time.time(),
                usage=turn.usage,
                error=TurnError(
                    code="interrupted",
                    message="The daemon stopped while this turn ran. Send `continue` to resume.",
                ),
            )
        )

    def configure(
        self,
        *,
        permission_mode: PermissionMode | None = None,
        model: str | None = None,
        subagent_model: str | None = None,
    ) -> None:
        """Change the session's settings, emitting `session_configured` with what changed
        (nothing when nothing does)."""
        mode = permission_mode if permission_mode != self.permission_mode else None
        chosen = model.strip() if model is not None else None
        chosen = chosen if chosen != self.model else None
        sub = subagent_model.strip() if subagent_model is not None else None
        sub = sub if sub != self.subagent_model else None
        if mode is not None or chosen is not None or sub is not None:
            self.emit(SessionConfigured(permission_mode=mode, model=chosen, subagent_model=sub))

    # --- the event stream -----------------------------------------------------------------

    def deny_for_daemon(self, approval: ApprovalRequest, reason: str) -> None:
        """Resolve an open approval request as denied by the daemon, its turn being over for
        `reason`."""
        self.emit(
            ApprovalResolved(
                approval_id=approval.id,
                turn_id=approval.turn_id,
                decision="deny",
                by="daemon",
                message=reason,
            )
        )

    def emit(self, event: AnyEvent) -> int:
        self.seq += 1
        seq = self.seq
        if _EMIT_LOG is not None:
            _EMIT_LOG.write(f"{self.id} {seq} {time.perf_counter():.6f}\n")
        self._apply(event)
        frame = notification_frame(
            "session/event",
            SessionEventParams(session_id=self.id, epoch=self.epoch, seq=seq, event=event),
        )
        delta = (
            DeltaFrame(frame, session_id=self.id, epoch=self.epoch, seq=seq, event=event)
            if isinstance(event, ItemDelta)
            else None
        )
        self.ring.append(seq, frame, delta=delta is not None)
        if not isinstance(event, EPHEMERAL_EVENTS):
            self.store.append_event_nowait(self.id, seq, _event_encoder.encode(event))
            if isinstance(event, TurnStarted | TurnCompleted | SessionRenamed | SessionConfigured):
                self.updated_at = time.time()
                self.store.update_session_nowait(self.row())
        dropped: list[Subscriber] = []
        for subscriber in self.subscribers:
            if delta is not None and subscriber in self._without_deltas:
                continue
            if not subscriber.offer(frame, delta):
                dropped.append(subscriber)
        for subscriber in dropped:
            del self.subscribers[subscriber]
            self._without_deltas.discard(subscriber)
            subscriber.send_nowait(
                notification_frame(
                    "session/resync",
                    SessionResyncParams(
                        session_id=self.id,
                        reason="the client fell behind; re-attach with the last cursor",
                    ),
                )
            )
        if dropped:
            self.on_subscribers()
        return seq

    def _apply(self, event: AnyEvent) -> None:
        match event:
            case ItemDelta(turn_id=turn_id, item_id=item_id, delta=delta):
                turn = self._turns_by_id.get(turn_id)
                if turn is not None:
                    turn.partial.setdefault(item_id, []).append(delta)
            case (
                ItemStarted(turn_id=turn_id, item=item)
                | ItemCompleted(turn_id=turn_id, item=item)
                | ItemUpdated(turn_id=turn_id, item=item)
            ):
                turn = self._turns_by_id.get(turn_id)
                if isinstance(item, UserMessage):
                    self.queued_inputs.pop(item.id, None)
                if turn is not None:
                    turn.items[item.id] = item
                    if isinstance(event, ItemCompleted):
                        turn.partial.pop(item.id, None)
                        turn.open_items.discard(item.id)
                    else:
                        turn.open_items.add(item.id)
            case TurnStarted(turn_id=turn_id, started_at=started_at):
                turn = TurnState(turn_id, started_at)
                self.turns.append(turn)
                self._turns_by_id[turn_id] = turn
            case TurnCompleted():
                turn = self._turns_by_id.get(event.turn_id)
                if turn is not None:
                    turn.status = event.status
                    turn.ended_at = event.ended_at
                    turn.usage = event.usage
                    turn.error = event.error
            case SessionRenamed(title=title):
                self.title = title
            case SessionConfigured(permission_mode=mode, model=model):
                if mode is not None:
                    self.permission_mode = mode
                if model is not None:
                    self.model = model
                if event.subagent_model is not None:
                    self.subagent_model = event.subagent_model
            case ApprovalRequested(approval=approval):
                self.pending_approvals[approval.id] = approval
            case ApprovalResolved(approval_id=approval_id):
                request = self.pending_approvals.pop(approval_id, None)
                if request is not None:
                    self.resolved_approvals[approval_id] = event
                    if event.decision == "allow" and event.scope == "always":
                        rule = request.always_rule
                        if rule and rule not in self.session_rules:
                            self.session_rules.append(rule)
            case InputQueued(input_id=input_id, text=text, by=by, context=context):
                self.queued_inputs[input_id] = QueuedInput(
                    input_id=input_id, text=text, by=by, context=context, images=event.images
                )
            case InputDropped(input_ids=input_ids):
                for input_id in input_ids:
                    self.queued_inputs.pop(input_id, None)
            case TodosUpdated(todos=todos):
                self.todos = todos
            case ContextUpdated(context=context):
                self.context = context
            case ModelRetry() | DiagnosticsReported():
                pass

    # --- views ----------------------------------------------------------------------------

    def row(self) -> SessionRow:
        """The session's row in the store as of now."""
        origin = self.forked_from
        return SessionRow(
            id=self.id,
            title=self.title,
            created_at=self.created_at,
            updated_at=self.updated_at,
            turn_count=len(self.turns),
            running_turn=self.running_turn_id,
            last_status=self.turns[-1].status if self.turns else None,
            model=self.model,
            permission_mode=self.permission_mode,
            forked_from=None if origin is None else origin.session_id,
            forked_turn=None if origin is None else origin.turn_id,
            worktree_root=None if self.worktree is None else self.worktree.root,
            worktree_branch=None if self.worktree is None else self.worktree.branch,
            worktree_base=None if self.worktree is None else self.worktree.base,
        )

    @property
    def running_turn_id(self) -> str | None:
        if self.turns and self.turns[-1].status == "running":
            return self.turns[-1].id
        return None

    def turn(self, turn_id: str) -> TurnState | None:
        return self._turns_by_id.get(turn_id)

    def items(self) -> list[AnyItem]:
        return [item for turn in self.turns for item in turn.items.values()]

    def info(self) -> SessionInfo:
        return SessionInfo(
            id=self.id,
            title=self.title,
            created_at=self.created_at,
            updated_at=self.updated_at,
            status="running" if self.running_turn_id else "idle",
            turn_count=len(self.turns),
            permission_mode=self.permission_mode,
            model=self.model,
            subagent_model=self.subagent_model,
            state=self.state(),
            clients=len(self.subscribers),
            forked_from=self.forked_from,
            worktree=self.worktree,
        )

    def state(self) -> SessionState:
        """What the session is doing (see `SessionState`)."""
        if self.running_turn_id is not None:
            return "awaiting_approval" if self.pending_approvals else "running"
        return state_after(self.turns[-1].status if self.turns else None)

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(
            session=self.info(),
            epoch=self.epoch,
            seq=self.seq,
            turns=[turn.snapshot() for turn in self.turns],
            pending_approvals=list(self.pending_approvals.values()),
            queued_inputs=list(self.queued_inputs.values()),
            todos=self.todos,
            context=self.context,
        )

    # --- subscribers ----------------------------------------------------------------------

    def attach(
        self,
        subscriber: Subscriber,
        role: Role,
        after: Cursor | None,
        *,
        item_deltas: bool = True,
        replay_bytes: int | None = None,
    ) -> tuple[SessionAttachResult, list[bytes]]:
        """Subscribe and return what catches the client up: with a usable cursor the frames it
        missed (to be queued right behind the response, before any await), otherwise a
        result carrying a snapshot.

        A cursor is usable when it names this epoch and the ring still reaches back to it.
        A seq means something only within its epoch (a restarted daemon numbers on from the
        last persisted event, so seq N of the new epoch is another event than N was), so a
        cursor without an epoch is answered with a snapshot, except `seq` 0: "everything",
        which the ring can replay only when it holds the session from its first event.

        Without `item_deltas`, neither the replay nor the live events carry `item_delta`s.
        `replay_bytes`: the most the subscriber can take of a replay (a client that fell far
        behind on a small budget); a longer one is answered with a snapshot instead."""
        replay: list[bytes] | None = None
        if (
            after is not None
            and after.seq <= self.seq
            and (after.epoch == self.epoch or (after.epoch is None and after.seq == 0))
        ):
            replay = self.ring.since(after.seq, deltas=item_deltas)
            if replay_bytes is not None and sum(map(len, replay or ())) > replay_bytes:
                replay = None
        # Subscribed before the snapshot is taken, so that its count of clients includes this one.
        self.subscribers[subscriber] = role
        if item_deltas:
            self._without_deltas.discard(subscriber)
        else:
            self._without_deltas.add(subscriber)
        if replay is None:
            result = SessionAttachResult(
                epoch=self.epoch, mode="snapshot", from_seq=self.seq, snapshot=self.snapshot()
            )
        else:
            assert after is not None
            result = SessionAttachResult(epoch=self.epoch, mode="replay", from_seq=after.seq)
        self.on_subscribers()
        return result, replay or []

    def detach(self, subscriber: Subscriber) -> bool:
        self._without_deltas.discard(subscriber)
        if self.subscribers.pop(subscriber, None) is None:
            return False
        self.on_subscribers()
        return True
