"""The daemon's sessions: creating and loading them, and running their turns.

Turns run in the daemon's own nursery, not in any client's, so a turn keeps going when the
client that started it disconnects. Each turn has its own cancel scope: `turn/cancel` cancels
it (the turn ends `cancelled`); daemon shutdown cancels it too (the turn ends `interrupted`).
Either way the turn ends with a summary item and `turn_completed`, both persisted.

One turn runs per session at a time; a message sent while one runs is queued (an
`input_queued` event every client sees, carrying the editor state and mentions read when it
was sent) and joins the conversation at the turn's next step. Messages still queued when a turn
ends without taking them are dropped with an `input_dropped` event. The repository's
instructions go with the first message that joins the history after they changed; they count
as sent only then, so a dropped message takes nothing with it.

Loaded sessions are a cache of the store. A session with no subscriber and no running turn
(so no pending approval) is idle; the `keep_idle` most recently idle ones stay loaded, older
ones are unloaded. The store holds every persisted event, so loading one again rebuilds the
same items, in a new epoch as after a restart: a client's cursor into the old epoch gets a
snapshot. What is not persisted goes with it: the replay ring, the edit guard's read versions
(the agent reads a file again before editing it) and the provider's last token count (the
meter estimates until the next model call).

`delete` refuses a session with a running turn (SESSION_BUSY). Otherwise it drops the session
from memory first (so no new turn can start on it), detaches its subscribers with a
`session/deleted` notification, then deletes it from the store.
"""

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import msgspec
import trio

from tether.daemon.config.settings import PermissionsConfig, WorkspaceRules, load_workspace_rules
from tether.daemon.context.compact import CompactionError, SummaryNotShorter
from tether.daemon.context.history import History
from tether.daemon.context.instructions import CLOSE_TAG, OPEN_TAG, load_project_instructions
from tether.daemon.context.mentions import render_context
from tether.daemon.context.prompt import system_prompt
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.report import format_report, wire_diagnostics
from tether.daemon.providers.base import ModelClient, ModelError
from tether.daemon.sessions.approvals import ApprovalBroker, SessionGate
from tether.daemon.sessions.context import SessionContext, compaction_item
from tether.daemon.sessions.session import Session, new_id
from tether.daemon.sessions.store import SessionRow, Store
from tether.daemon.tools.base import (
    ChangeTracker,
    NoChanges,
    ReadVersions,
    ToolContext,
)
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.turn.loop import TurnLoop, TurnOutcome, split_cancelled
from tether.daemon.turn.permissions import PermissionPolicy
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    ContextMeter,
    DiagnosticsReported,
    InputDropped,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
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
)
from tether.protocol.items import (
    AnyItem,
    FileChange,
    Notice,
    NoticeLevel,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import (
    EditorContext,
    SessionCompactResult,
    SessionDeletedParams,
    TurnStartResult,
)
from tether.protocol.session import QueuedInput, SessionInfo

log = logging.getLogger(__name__)

ChangeTrackerFactory = Callable[[Session, str], ChangeTracker]


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """What goes with a user's message, read when it is sent (`Sessions.turn_input`)."""

    instructions: str = ""
    """The repository's instructions as read then ("" when there are none)."""
    context: str = ""
    """Editor state and mentioned files, rendered for the model."""
    problems: Sequence[str] = ()
    """Paths that could not be attached, and why, for the client that sent them."""


class _Sink:
    """Routes one turn's items into its session's event stream."""

    def __init__(self, live: "_Live", turn_id: str) -> None:
        self.live = live
        self.session = live.session
        self.turn_id = turn_id

    def item_started(self, item: AnyItem) -> None:
        self.session.emit(ItemStarted(turn_id=self.turn_id, item=item))

    def item_delta(self, item_id: str, delta: str) -> None:
        self.session.emit(ItemDelta(turn_id=self.turn_id, item_id=item_id, delta=delta))

    def item_completed(self, item: AnyItem) -> None:
        self.session.emit(ItemCompleted(turn_id=self.turn_id, item=item))

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


class _RunningTurn:
    def __init__(self, turn_id: str, *, compaction: bool = False) -> None:
        self.turn_id = turn_id
        self.compaction = compaction
        """A `session/compact` turn, which takes no queued messages."""
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.interrupted = False
        """Cancelled by a daemon shutdown rather than by a client."""
        self.started = time.monotonic()


class _Live:
    """What the daemon keeps beside a loaded session's state."""

    def __init__(self, session: Session, history: History, context: SessionContext) -> None:
        self.session = session
        self.history = history
        self.broker = ApprovalBroker(session)
        self.versions = ReadVersions()
        self.context = context
        self.instructions = _last_sent_instructions(session.items())
        """The repository instructions last sent to the model in this session."""
        self.read_instructions: str | None = None
        """The repository instructions as last read, for the next message that joins the
        history (None: not read since the session was loaded)."""

    def with_instructions(self, context: str) -> str:
        """The context of a message that joins the history now: the instructions as last read
        in front of `context` when they differ from those last sent, which they then are."""
        instructions = self.read_instructions
        if instructions is None or instructions == self.instructions:
            return context
        self.instructions = instructions
        return "\n\n".join(part for part in (instructions, context) if part)


def _last_sent_instructions(items: Iterable[AnyItem]) -> str:
    """The instructions the newest user message that carried any was sent with."""
    for item in reversed(list(items)):
        if isinstance(item, UserMessage) and item.context.startswith(OPEN_TAG):
            end = item.context.find(CLOSE_TAG)
            if end >= 0:
                return item.context[: end + len(CLOSE_TAG)]
    return ""


KEEP_IDLE = 8
"""Idle sessions kept loaded (the most recently used); older idle ones are unloaded."""


class Sessions:
    def __init__(
        self,
        *,
        store: Store,
        workspace: Path,
        model: ModelClient,
        tools: ToolRegistry,
        max_steps: int = 60,
        permissions: PermissionsConfig | None = None,
        context_window: int = 65536,
        max_output_tokens: int = 8192,
        keep_idle: int = KEEP_IDLE,
    ) -> None:
        if keep_idle < 1:
            raise ValueError("keep_idle must be at least 1: a session just looked up stays loaded")
        self.keep_idle = keep_idle
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.store = store
        self.workspace = workspace
        self.model = model
        self.tools = tools
        self.max_steps = max_steps
        self.permissions = permissions or PermissionsConfig()
        self.services: dict[str, object] = {}
        """Daemon-owned services handed to tools (the process table, …)."""
        self.change_tracker: ChangeTrackerFactory = lambda _session, _turn: NoChanges()
        self.lsp: LspPool | None = None
        """The language-server pool for diagnostics after edits (None: no diagnostics)."""
        self._live: dict[str, _Live] = {}
        self._idle: dict[str, None] = {}
        """Loaded sessions that were idle when last settled, least recently used first."""
        self._loading: dict[str, trio.Event] = {}
        self._running: dict[str, _RunningTurn] = {}
        self._nursery: trio.Nursery | None = None
        self.accepting = True
        self.on_turn_end: Callable[[], None] = lambda: None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the turns. Marks turns a previous daemon left running as interrupted, then
        reports ready. Cancelling this interrupts every running turn."""
        for session_id in await self.store.sessions_with_running_turn():
            await self.get(session_id)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # --- lookup ---------------------------------------------------------------------------

    @property
    def loaded_count(self) -> int:
        return len(self._live)

    @property
    def running_count(self) -> int:
        return len(self._running)

    async def _system_prompt(self) -> str:
        """The system prompt for a session being created or loaded. Built per session (the
        git branch and the top-level entries change while the daemon runs), in a worker
        thread (it reads the file system)."""
        return await trio.to_thread.run_sync(system_prompt, self.workspace)

    async def create(
        self, title: str = "", permission_mode: PermissionMode | None = None
    ) -> Session:
        prompt = await self._system_prompt()
        now = time.time()
        row = SessionRow(new_id("s"), title, now, now, 0, None)
        self.store.create_session_nowait(row)
        session = Session(row, self.store, permission_mode=self.permissions.mode)
        if permission_mode is not None and permission_mode != session.permission_mode:
            session.emit(SessionConfigured(permission_mode=permission_mode))
        self._live[session.id] = self._make_live(session, History(prompt))
        self._settle(session.id)
        return session

    def _make_live(self, session: Session, history: History) -> _Live:
        context = SessionContext(
            session,
            history,
            self.model,
            self.tools.toolset,
            window=self.context_window,
            max_output=self.max_output_tokens,
        )
        # By id: a closure over the session would be a reference cycle, and an unloaded
        # session would then wait for the cycle collector instead of being freed at once.
        session_id = session.id
        session.on_subscribers = lambda: self._settle(session_id)
        return _Live(session, history, context)

    def _unloadable(self, live: _Live) -> bool:
        session = live.session
        return (
            not session.subscribers
            and session.id not in self._running
            and not session.pending_approvals
        )

    def _settle(self, session_id: str) -> None:
        """Note that a loaded session was used or may have become idle: an idle one becomes
        the most recently idle, a busy one leaves the idle list, and idle sessions beyond the
        `keep_idle` most recent are unloaded. Synchronous, so no task sees half of it."""
        self._idle.pop(session_id, None)
        live = self._live.get(session_id)
        if live is not None and self._unloadable(live):
            self._idle[session_id] = None
        while len(self._idle) > self.keep_idle:
            oldest = next(iter(self._idle))
            del self._idle[oldest]
            candidate = self._live.get(oldest)
            if candidate is not None and self._unloadable(candidate):
                del self._live[oldest]

    async def get(self, session_id: str) -> Session:
        return (await self._get_live(session_id)).session

    async def _get_live(self, session_id: str) -> _Live:
        """The session, loaded from the store on first use; `SESSION_NOT_FOUND` otherwise."""
        while (live := self._live.get(session_id)) is None:
            loading = self._loading.get(session_id)
            if loading is not None:
                await loading.wait()
                continue
            loading = self._loading[session_id] = trio.Event()
            try:
                row = await self.store.get_session(session_id)
                if row is None:
                    raise RpcError(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")
                events = await self.store.load_events(session_id)
                session = Session.restore(
                    row, self.store, events, permission_mode=self.permissions.mode
                )
                history = History(await self._system_prompt())
                history.rebuild(session.items())
                live = self._make_live(session, history)
                # The meter is not persisted: show the estimate until a model call reports.
                meter = live.context.meter
                session.context = ContextMeter(used=meter.used(), budget=meter.budget)
                self._live[session_id] = live
            finally:
                del self._loading[session_id]
                loading.set()
        self._settle(session_id)
        return live

    def loaded(self, session_id: str) -> Session | None:
        """The session if it is in memory (without loading it)."""
        live = self._live.get(session_id)
        return None if live is None else live.session

    async def delete(self, session_id: str, *, by: str = "") -> None:
        """Delete the session and everything stored for it. SESSION_BUSY while a turn (or a
        compaction) runs, SESSION_NOT_FOUND when there is no such session; a store failure
        raises `StoreError` and leaves the session in the store.

        Cancellation: once the store has the delete queued it happens; cancelling only stops
        waiting for it."""
        while (loading := self._loading.get(session_id)) is not None:
            await loading.wait()
        if session_id in self._running:
            raise RpcError(
                ErrorCode.SESSION_BUSY,
                f"session {session_id} has a running turn; cancel it or wait for it to end",
            )
        live = self._live.pop(session_id, None)
        if live is not None:
            frame = notification_frame(
                "session/deleted", SessionDeletedParams(session_id=session_id, by=by)
            )
            for subscriber in list(live.session.subscribers):
                subscriber.send_nowait(frame)
            live.session.subscribers.clear()
        if not await self.store.delete_session(session_id) and live is None:
            raise RpcError(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")

    async def list(self) -> list[SessionInfo]:
        rows = await self.store.list_sessions()
        infos: list[SessionInfo] = []
        for row in rows:
            live = self._live.get(row.id)
            if live is not None:
                infos.append(live.session.info())
            else:
                infos.append(
                    SessionInfo(
                        id=row.id,
                        title=row.title,
                        created_at=row.created_at,
                        updated_at=row.updated_at,
                        turn_count=row.turn_count,
                        permission_mode=self.permissions.mode,
                    )
                )
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos

    # --- approvals ------------------------------------------------------------------------

    async def broker(self, session_id: str) -> ApprovalBroker:
        return (await self._get_live(session_id)).broker

    # --- turns ----------------------------------------------------------------------------

    async def turn_input(
        self, *, editor: EditorContext | None, mentions: Sequence[str]
    ) -> TurnInput:
        """Read what goes with a user's message: the repository's instructions, editor state
        and mentions. Reads files only; `start_turn` decides what joins the history."""
        instructions = await trio.to_thread.run_sync(load_project_instructions, self.workspace)
        block = ""
        problems: Sequence[str] = ()
        if editor is not None or mentions:
            cursor = (
                (editor.cursor.line, editor.cursor.column) if editor and editor.cursor else None
            )
            block, problems = await trio.to_thread.run_sync(
                lambda: render_context(
                    self.workspace,
                    open_file=editor.open_file if editor else None,
                    cursor=cursor,
                    selection=editor.selection if editor else None,
                    mentions=mentions,
                )
            )
        return TurnInput(instructions=instructions, context=block, problems=problems)

    async def compact(self, session: Session) -> SessionCompactResult:
        """Summarise the session's older history now (`session/compact`), as a turn of its
        own so that every client sees the compaction item.

        When a summary cannot shorten the conversation nothing changes and the result says so
        (`compacted: false` with the reason; no turn at all when that is clear before asking
        the model). Cancelled (`turn/cancel`), the turn ends `cancelled` and nothing changes.
        A model error raises MODEL_UNAVAILABLE, an empty or unusable summary
        COMPACTION_FAILED: the turn ends `failed`, with a notice and no compaction item."""
        if not self.accepting or self._nursery is None:
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        if session.id in self._running:
            raise RpcError(
                ErrorCode.SESSION_BUSY, "a turn is running; it compacts itself when it needs to"
            )
        live = self._live_of(session)
        before = live.context.meter.used()
        if not live.context.can_compact(live.history):
            return SessionCompactResult(
                tokens_before=before,
                tokens_after=before,
                compacted=False,
                reason="the conversation is too short for a summary to make it smaller",
            )
        turn_id = new_id("t")
        running = self._running[session.id] = _RunningTurn(turn_id, compaction=True)
        self._settle(session.id)
        session.emit(TurnStarted(turn_id=turn_id, started_at=time.time()))
        sink = _Sink(live, turn_id)
        status: TurnStatus = "failed"
        error: TurnError | None = TurnError(
            code="internal_error", message="tether failed while compacting"
        )
        failure: RpcError | None = None
        reason = ""
        try:
            with running.scope:
                record = await live.context.compact_now(live.history)
                if record is None:
                    reason = "there is nothing to summarise"
                else:
                    item = compaction_item(record)
                    sink.item_started(item)
                    sink.item_completed(item)
            status, error = "completed", None
            if running.scope.cancelled_caught:
                status = "interrupted" if running.interrupted else "cancelled"
                reason = "cancelled"
        except SummaryNotShorter as exc:
            status, error, reason = "completed", None, exc.message
            _notice(sink, "info", "compaction_skipped", exc.message)
        except ModelError as exc:
            error = TurnError(code=exc.code, message=exc.message)
            failure = RpcError(ErrorCode.MODEL_UNAVAILABLE, exc.message, {"code": exc.code})
        except CompactionError as exc:
            error = TurnError(code="compaction_failed", message=exc.message)
            failure = RpcError(ErrorCode.COMPACTION_FAILED, exc.message)
        finally:
            if failure is not None:
                _notice(sink, "error", error.code if error else "", failure.message)
            session.emit(
                TurnCompleted(turn_id=turn_id, status=status, ended_at=time.time(), error=error)
            )
            del self._running[session.id]
            running.done.set()
            self.on_turn_end()
            self._settle(session.id)
        if failure is not None:
            raise failure
        if status == "interrupted":
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon stopped before the summary")
        return SessionCompactResult(
            tokens_before=before,
            tokens_after=live.context.meter.used(),
            compacted=not reason,
            reason=reason,
        )

    def start_turn(
        self,
        session: Session,
        text: str,
        *,
        by: str = "",
        permission_mode: PermissionMode | None = None,
        turn_input: TurnInput | None = None,
    ) -> TurnStartResult:
        """Start a turn, or queue the message for the running one. `turn_input` is what goes
        with it (None: nothing); its problems are returned to the caller."""
        if not self.accepting or self._nursery is None:
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        live = self._live_of(session)
        running = self._running.get(session.id)
        if running is not None and running.compaction:
            # Queued, it would wait for some later turn: refused, the client still has it.
            raise RpcError(
                ErrorCode.SESSION_BUSY, "the session is being compacted; send it again after"
            )
        sent = turn_input or TurnInput()
        if turn_input is not None:
            live.read_instructions = turn_input.instructions
        if permission_mode is not None and permission_mode != session.permission_mode:
            session.emit(SessionConfigured(permission_mode=permission_mode))
        problems = list(sent.problems)
        if running is not None:
            input_id = new_id("i")
            session.emit(InputQueued(input_id=input_id, text=text, by=by, context=sent.context))
            return TurnStartResult(
                turn_id=running.turn_id, queued=True, input_id=input_id, problems=problems
            )
        turn_id = new_id("t")
        running = self._running[session.id] = _RunningTurn(turn_id)
        self._settle(session.id)
        session.emit(TurnStarted(turn_id=turn_id, started_at=time.time()))
        if not session.title:
            session.emit(SessionRenamed(title=_title_from(text)))
        context = live.with_instructions(sent.context)
        item = UserMessage(id=new_id("i"), text=text, context=context)
        session.emit(ItemStarted(turn_id=turn_id, item=item))
        session.emit(ItemCompleted(turn_id=turn_id, item=item))
        live.history.add_user(text, context)
        self._nursery.start_soon(self._run_turn, live, running)
        return TurnStartResult(turn_id=turn_id, input_id=item.id, problems=problems)

    def _live_of(self, session: Session) -> _Live:
        live = self._live.get(session.id)
        if live is None or live.session is not session:
            # Callers look a session up again after any await, so an unloaded session here was
            # deleted meanwhile.
            raise RpcError(ErrorCode.SESSION_NOT_FOUND, f"session {session.id} was deleted")
        return live

    def cancel_turn(self, session: Session, turn_id: str | None) -> str:
        running = self._running.get(session.id)
        if running is None or (turn_id is not None and turn_id != running.turn_id):
            raise RpcError(
                ErrorCode.NO_RUNNING_TURN,
                f"session {session.id} has no running turn" + (f" {turn_id}" if turn_id else ""),
            )
        running.scope.cancel()
        return running.turn_id

    async def interrupt_all(self) -> None:
        """Stop every running turn (they end `interrupted`) and wait until they have."""
        for running in list(self._running.values()):
            running.interrupted = True
            running.scope.cancel()
        for running in list(self._running.values()):
            await running.done.wait()

    async def wait_idle(self, session_id: str) -> None:
        running = self._running.get(session_id)
        if running is not None:
            await running.done.wait()

    def _policy(self, session: Session, workspace: WorkspaceRules) -> PermissionPolicy:
        user = self.permissions
        policy = PermissionPolicy(
            mode=session.permission_mode,
            allow=user.allow,
            ask=[*user.ask, *workspace.ask],
            deny=[*user.deny, *workspace.deny],
        )
        policy.session_rules = session.session_rules
        return policy

    async def _run_turn(self, live: _Live, running: _RunningTurn) -> None:
        session = live.session
        turn_id = running.turn_id
        changes = self.change_tracker(session, turn_id)
        sink = _Sink(live, turn_id)

        def context(item: ToolCall) -> ToolContext:
            return ToolContext(
                self.workspace,
                session_id=session.id,
                turn_id=turn_id,
                item_id=item.id,
                versions=live.versions,
                changes=changes,
                output=lambda text: sink.item_delta(item.id, text),
                services={**self.services, "todos": _TodoBoard(session)},
            )

        async def diagnose(item: ToolCall, paths: list[Path]) -> str:
            if self.lsp is None:
                return ""
            found = await self.lsp.diagnostics_after_edit([self.workspace / path for path in paths])
            if found:
                session.emit(
                    DiagnosticsReported(
                        turn_id=turn_id,
                        item_id=item.id,
                        diagnostics=wire_diagnostics(found, self.workspace),
                    )
                )
            return format_report(found, self.workspace)

        # Read once per turn, off the event loop: the rules and the notice come from one read.
        # Shielded (a worker thread cannot be interrupted anyway), so that no cancellation
        # lands before the `try` that ends every turn with its summary.
        rules = WorkspaceRules()
        with trio.CancelScope(shield=True):
            rules = await trio.to_thread.run_sync(load_workspace_rules, self.workspace)
        gate = SessionGate(
            session=session,
            broker=live.broker,
            policy=self._policy(session, rules),
            tools=self.tools,
            workspace=self.workspace,
            turn_id=turn_id,
            context=context,
            prewarm=(lambda path: lsp.prewarm([path])) if (lsp := self.lsp) is not None else None,
        )
        loop = TurnLoop(
            model=self.model,
            tools=self.tools,
            tool_context=context,
            history=live.history,
            sink=sink,
            new_id=lambda: new_id("i"),
            gate=gate,
            compactor=live.context,
            diagnose=diagnose,
            max_steps=self.max_steps,
        )
        ignored = rules.ignored
        if ignored:
            notice = Notice(
                id=new_id("i"),
                level="warning",
                code="workspace_config",
                message=(
                    "Ignored settings in the workspace's .tether/config.toml that only your own "
                    f"config may set: {', '.join(ignored)}."
                ),
            )
            sink.item_started(notice)
            sink.item_completed(notice)
        outcome: TurnOutcome | None = None
        status: TurnStatus = "interrupted"
        error: TurnError | None = None
        try:
            with running.scope:
                outcome = await loop.run()
            if outcome is None:
                status = "interrupted" if running.interrupted else "cancelled"
            else:
                status, error = outcome.status, outcome.error
        except BaseException as exc:
            # Cancellation can arrive as a group (from a nursery inside a tool), alone or
            # beside a bug's exception: it decides the status; a bug is logged.
            cancelled, errors = split_cancelled(exc)
            if errors is not None:
                log.exception("turn %s failed", turn_id, exc_info=errors)
            if running.scope.cancel_called:
                status = "interrupted" if running.interrupted else "cancelled"
            elif errors is not None:
                status = "failed"
                error = TurnError(code="internal_error", message=f"tether failed: {errors!r}")
            # else: cancelled from outside the turn (the daemon is going away): interrupted.
            if cancelled is exc:
                raise
            if cancelled is not None:
                raise cancelled from None
        finally:
            if status == "interrupted":
                error = TurnError(
                    code="interrupted",
                    message="The daemon stopped while this turn ran. Send `continue` to resume.",
                )
            if session.queued_inputs:
                session.emit(
                    InputDropped(
                        input_ids=list(session.queued_inputs),
                        reason=f"the turn ended ({status}) before taking them",
                    )
                )
            files: list[FileChange] = []
            summarize = getattr(changes, "files_changed", None)
            if callable(summarize):
                files = list(summarize())  # type: ignore[arg-type]
            usage = outcome.usage if outcome is not None else loop.usage()
            summary = TurnSummary(
                id=new_id("i"),
                stop_reason=status,
                duration_seconds=round(time.monotonic() - running.started, 3),
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                tokens_estimated=loop.tokens_estimated,
                model_calls=loop.model_calls,
                files_changed=files,
            )
            sink.item_started(summary)
            sink.item_completed(summary)
            session.emit(
                TurnCompleted(
                    turn_id=turn_id,
                    status=status,
                    ended_at=time.time(),
                    usage=usage,
                    error=error,
                )
            )
            del self._running[session.id]
            running.done.set()
            self.on_turn_end()
            self._settle(session.id)


def _notice(sink: _Sink, level: NoticeLevel, code: str, message: str) -> None:
    item = Notice(id=new_id("i"), level=level, code=code, message=message)
    sink.item_started(item)
    sink.item_completed(item)


class _TodoBoard:
    """The session's todo list as tools see it."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def set(self, todos: list[TodoEntry]) -> None:
        self.session.emit(TodosUpdated(todos=todos))


def _title_from(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:80]
