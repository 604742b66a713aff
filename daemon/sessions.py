"""The daemon's sessions: creating and loading them, and running their turns.

Turns run in the daemon's own nursery, not in any client's, so a turn keeps going when the
client that started it disconnects. Each turn has its own cancel scope: `turn/cancel` cancels
it (the turn ends `cancelled`); daemon shutdown cancels the nursery (the turn ends
`interrupted`). Either way the turn's last event, `turn_completed`, is emitted and persisted.

One turn runs per session at a time; a message sent while one runs is queued and joins the
conversation at the turn's next step.
"""

import logging
import time
from collections.abc import Callable
from pathlib import Path

import trio

from tether.daemon.history import History
from tether.daemon.loop import TurnLoop, TurnOutcome
from tether.daemon.prompt import system_prompt
from tether.daemon.providers.base import ModelClient
from tether.daemon.session import Session, new_id
from tether.daemon.store import SessionRow, Store
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    SessionRenamed,
    TurnCompleted,
    TurnError,
    TurnStarted,
    TurnStatus,
)
from tether.protocol.items import AnyItem, UserMessage
from tether.protocol.session import QueuedInput, SessionInfo

log = logging.getLogger(__name__)


class _Sink:
    """Routes one turn's items into its session's event stream."""

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.turn_id = turn_id

    def item_started(self, item: AnyItem) -> None:
        self.session.emit(ItemStarted(turn_id=self.turn_id, item=item))

    def item_delta(self, item_id: str, delta: str) -> None:
        self.session.emit(ItemDelta(turn_id=self.turn_id, item_id=item_id, delta=delta))

    def item_completed(self, item: AnyItem) -> None:
        self.session.emit(ItemCompleted(turn_id=self.turn_id, item=item))

    def take_queued(self) -> list[QueuedInput]:
        # The user message items that join them (same ids) take them off the queue.
        return list(self.session.queued_inputs.values())


class _RunningTurn:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.interrupted = False
        """Cancelled by a daemon shutdown rather than by a client."""


class Sessions:
    def __init__(
        self,
        *,
        store: Store,
        workspace: Path,
        model: ModelClient,
        tools: ToolRegistry,
        max_steps: int = 60,
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.model = model
        self.tools = tools
        self.max_steps = max_steps
        self._system_prompt = system_prompt(workspace)
        self._loaded: dict[str, Session] = {}
        self._histories: dict[str, History] = {}
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
        return len(self._loaded)

    @property
    def running_count(self) -> int:
        return len(self._running)

    async def create(self, title: str = "") -> Session:
        now = time.time()
        row = SessionRow(new_id("s"), title, now, now, 0, None)
        self.store.create_session_nowait(row)
        session = Session(row, self.store)
        self._loaded[session.id] = session
        self._histories[session.id] = History(self._system_prompt)
        return session

    async def get(self, session_id: str) -> Session:
        """The session, loaded from the store on first use; `SESSION_NOT_FOUND` otherwise."""
        while (session := self._loaded.get(session_id)) is None:
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
                session = Session.restore(row, self.store, events)
                history = History(self._system_prompt)
                history.rebuild(session.items())
                self._loaded[session_id] = session
                self._histories[session_id] = history
            finally:
                del self._loading[session_id]
                loading.set()
        return session

    async def list(self) -> list[SessionInfo]:
        rows = await self.store.list_sessions()
        infos: list[SessionInfo] = []
        for row in rows:
            live = self._loaded.get(row.id)
            if live is not None:
                infos.append(live.info())
            else:
                infos.append(
                    SessionInfo(
                        id=row.id,
                        title=row.title,
                        created_at=row.created_at,
                        updated_at=row.updated_at,
                        turn_count=row.turn_count,
                    )
                )
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos

    # --- turns ----------------------------------------------------------------------------

    def start_turn(self, session: Session, text: str) -> str:
        """Start a turn, or queue the message for the running one; return the turn's id."""
        if not self.accepting or self._nursery is None:
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        running = self._running.get(session.id)
        if running is not None:
            session.emit(InputQueued(input_id=new_id("i"), text=text))
            return running.turn_id
        turn_id = new_id("t")
        running = self._running[session.id] = _RunningTurn(turn_id)
        session.emit(TurnStarted(turn_id=turn_id, started_at=time.time()))
        if not session.title:
            session.emit(SessionRenamed(title=_title_from(text)))
        item = UserMessage(id=new_id("i"), text=text)
        session.emit(ItemStarted(turn_id=turn_id, item=item))
        session.emit(ItemCompleted(turn_id=turn_id, item=item))
        history = self._histories[session.id]
        history.add_user(text)
        self._nursery.start_soon(self._run_turn, session, running, history)
        return turn_id

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

    async def _run_turn(self, session: Session, running: _RunningTurn, history: History) -> None:
        loop = TurnLoop(
            model=self.model,
            tools=self.tools,
            tool_context=ToolContext(self.workspace),
            history=history,
            sink=_Sink(session, running.turn_id),
            new_id=lambda: new_id("i"),
            max_steps=self.max_steps,
        )
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
        except Exception as exc:
            log.exception("turn %s failed", running.turn_id)
            status = "failed"
            error = TurnError(code="internal_error", message=f"tether failed: {exc!r}")
        finally:
            if status == "interrupted":
                error = TurnError(
                    code="interrupted",
                    message="The daemon stopped while this turn ran. Send `continue` to resume.",
                )
            session.emit(
                TurnCompleted(
                    turn_id=running.turn_id,
                    status=status,
                    ended_at=time.time(),
                    usage=outcome.usage if outcome is not None else loop.usage(),
                    error=error,
                )
            )
            del self._running[session.id]
            running.done.set()
            self.on_turn_end()


def _title_from(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:80]
