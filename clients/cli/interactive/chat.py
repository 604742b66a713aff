"""The interactive session: a prompt at the bottom of the terminal, the session's events
printed above it into the scrollback, a status line under it.

Threads: prompt_toolkit runs an asyncio loop on the main thread, and everything that draws or
changes state runs there. `SharedClient`'s reader thread only queues notifications and wakes
the loop (`_drain`); calls to the daemon run in worker threads (`_call`) so that a slow one
(`session/compact`) never stops the events or the keyboard. While an attach is being answered
the loop holds the session's events back (`_holding`), so that the snapshot is drawn before
the events that follow it.

Output: the renderer runs without a live region (`Renderer(region=False)`), so it writes only
whole lines, once, which `_emit` puts above the prompt; what moves (the running call, its
spinner and time, "thinking…", a retry's countdown) is `Renderer.activity`, drawn on the line
above the prompt, which prompt_toolkit redraws. Everything else that would print (the
approval answerer's lines) goes through `note`.

Leaving (Ctrl-D, `/exit`, Ctrl-C twice) detaches: the daemon keeps a running turn running.
"""

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO, TypeVar

from prompt_toolkit import PromptSession
from prompt_toolkit.patch_stdout import patch_stdout

from tether.clients.cli.approvals import ApprovalAnswerer
from tether.clients.cli.images import ImageFile
from tether.clients.cli.interactive.leaving import SecondCtrlC
from tether.clients.cli.interactive.output import TerminalLines
from tether.clients.cli.interactive.picker import pick
from tether.clients.cli.interactive.prompt import DIM, RESET, make_prompt
from tether.clients.cli.interactive.question import InlineQuestion
from tether.clients.cli.interactive.state import ChatState
from tether.clients.cli.mentions import parse_cli_mentions
from tether.clients.cli.render import Renderer, visible
from tether.clients.core.channel import SharedClient
from tether.clients.core.rpc import CallError
from tether.clients.core.websocket import WebSocketError
from tether.protocol.base import Wire
from tether.protocol.environment import without_secrets
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ItemStarted,
    PermissionMode,
    SessionConfigured,
)
from tether.protocol.items import UserMessage
from tether.protocol.methods import (
    MODELS_LIST,
    SESSION_ATTACH,
    SESSION_CONFIGURE,
    SESSION_CREATE,
    SESSION_DETACH,
    SESSION_LIST,
    TURN_CANCEL,
    TURN_START,
    DaemonEventParams,
    Empty,
    ImageInput,
    Method,
    SessionAttachParams,
    SessionConfigureParams,
    SessionCreateParams,
    SessionDeletedParams,
    SessionEventParams,
    SessionRef,
    SessionResyncParams,
    TurnCancelParams,
    TurnStartParams,
)
from tether.protocol.session import Cursor, SessionInfo

P = TypeVar("P", bound=Wire)
R = TypeVar("R", bound=Wire)
T = TypeVar("T")

HISTORY_TURNS = 3
"""Turns of a session's transcript shown when attaching to it."""

CLIENTS_REFRESH_S = 5.0
"""How often the status line's count of attached clients is read again."""

TAKES_THE_TERMINAL = frozenset({"/sessions"})
"""Commands that draw an application of their own: run between two prompts."""

TICK_S = 0.1


class Chat:
    """One interactive session of the CLI on `client`, in `workspace`."""

    def __init__(
        self,
        client: SharedClient,
        workspace: Path,
        *,
        slash: "Callable[[Chat, str], Awaitable[None]]",
        permission_mode: PermissionMode | None = None,
        bell: bool = True,
    ) -> None:
        """`slash` runs a line that starts with `/` (see `actions.run_slash`); `bell`: ring
        the terminal's bell when an approval waits (once for each)."""
        self._slash = slash
        self.bell = bell
        self.client = client
        self.workspace = workspace
        self.permission_mode: PermissionMode | None = permission_mode
        """Given on the command line: applied to the session this chat creates or attaches."""
        self.state = ChatState()
        self.cursor = Cursor()
        self.models: list[str] = []
        self.sessions: list[SessionInfo] = []
        self.images: list[ImageFile] = []
        """Image files `/image` chose for the next message (kept until one is sent)."""
        self._out: TextIO = sys.stdout
        self.lines = TerminalLines(self._emit, self.invalidate)
        self.renderer = self._new_renderer()
        self.question = InlineQuestion(self.invalidate, self.note)
        self.answerer: ApprovalAnswerer | None = None
        self._holding = False
        self._leaving = False
        self.ctrl_c = SecondCtrlC()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.prompt: PromptSession[str] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._inputs: asyncio.Queue[str] = asyncio.Queue()
        """Lines typed, waiting for the ones before them to be sent (`_sender`)."""

    # --- output ---------------------------------------------------------------------------

    def _new_renderer(self) -> Renderer:
        return Renderer(
            out=self.lines,
            err=self.lines,
            live=True,
            status_live=True,
            terminal_size=self.terminal_size,
            region=False,
        )

    def terminal_size(self) -> tuple[int, int]:
        app = self.prompt.app if self.prompt is not None else None
        if app is not None and app.is_running:
            size = app.output.get_size()
            return size.columns, size.rows
        columns, rows = shutil.get_terminal_size()
        return columns, rows

    def _emit(self, text: str) -> None:
        """Write lines above the prompt: erase it, write, draw it again below. Unlike
        prompt_toolkit's `run_in_terminal`, the terminal stays in raw mode meanwhile, so that
        keys typed while the agent streams keep their meaning (Enter sends, Ctrl-C is a key)."""
        app = self.prompt.app if self.prompt is not None else None
        if app is None or not app.is_running:
            self._out.write(text)
            self._out.flush()
            return
        app.renderer.erase()
        self._out.write(text)
        self._out.flush()
        app.renderer.reset()
        app.renderer.request_absolute_cursor_position()
        app.invalidate()

    def ring(self) -> None:
        """Ring the terminal's bell (BEL moves nothing: the prompt stays drawn)."""
        app = self.prompt.app if self.prompt is not None else None
        if app is not None and app.is_running:
            app.output.bell()
        else:
            self._out.write("\a")
            self._out.flush()

    def note(self, text: str) -> None:
        """Print one of the interactive mode's own lines above the prompt."""
        self.lines.note(text)

    def invalidate(self) -> None:
        if self.prompt is not None and self.prompt.app.is_running:
            self.prompt.app.invalidate()

    # --- talking to the daemon --------------------------------------------------------------

    async def call(self, method: Method[P, R], params: P) -> R:
        """`method` called in a worker thread: events and keys go on meanwhile."""
        return await asyncio.to_thread(lambda: self.client.call(method, params))

    async def in_thread(self, work: Callable[[], T]) -> T:
        return await asyncio.to_thread(work)

    def _wake(self) -> None:
        """On the reader thread: a notification is queued."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: the chat is over
            loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        while not self._holding:
            try:
                method, params = self.client.next_notification(timeout=0)
            except TimeoutError:
                return
            except (WebSocketError, OSError) as exc:
                if not self._leaving:
                    self.note(f"tether: lost the connection to the daemon: {exc}")
                    self.leave()
                return
            self._notification(method, params)

    def _notification(self, method: str, params: Wire) -> None:
        match params:
            case SessionEventParams(session_id=session_id) if session_id == self.state.session_id:
                self._event(params)
            case SessionResyncParams(session_id=session_id) if session_id == self.state.session_id:
                self.spawn(self._attach(session_id, after=self.cursor))
            case SessionDeletedParams(session_id=session_id, by=by) if (
                session_id == self.state.session_id
            ):
                who = visible(by or "a client")
                self.note(f"tether: session {session_id} was deleted by {who}")
                self._forget_session()
            case DaemonEventParams(message=message):
                self.note(f"tether: {visible(message)}")
            case _:
                pass

    def _event(self, params: SessionEventParams) -> None:
        self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
        event = params.event
        self.state.apply(event, time.monotonic())
        match event:
            case ItemStarted(item=UserMessage(text=text)):
                self.lines.flush()
                self.note(f"» {visible(text, multiline=True)}")
            case SessionConfigured(permission_mode=mode, model=model):
                if mode is not None:
                    self.note(f"tether: permission mode: {mode}")
                if model is not None:
                    self.note(f"tether: model: {visible(model or self.state.model_shown)}")
            case _:
                pass
        self.renderer.event(params)
        match event:
            case ApprovalRequested(approval=approval):
                self._ask(approval)
            case ApprovalResolved(approval_id=approval_id, by=by):
                if self.answerer is not None:
                    self.answerer.resolved(approval_id, by)
            case _:
                pass
        self.invalidate()

    # --- approvals --------------------------------------------------------------------------

    def _ask(self, approval: ApprovalRequest, *, describe: bool = False) -> None:
        """Ask `approval` now, or after those asked before it (the answerer keeps the order
        and describes one again when its turn comes)."""
        if self.answerer is not None:
            self.answerer.requested(approval, describe=describe)

    def answer_question(self, line: str) -> None:
        if self.answerer is None:
            return
        self.question.give(line)
        try:
            self.answerer.poll()
        except CallError as exc:
            self.note(f"tether: {visible(exc.message)}")

    # --- sessions ---------------------------------------------------------------------------

    async def _attach(self, session_id: str, *, after: Cursor | None = None) -> None:
        """Attach as controller and draw what the session holds: the last turns, a pending
        approval (asked at once). With `after` (a resync), only what was missed."""
        self._holding = True
        try:
            params = SessionAttachParams(session_id=session_id, after=after, role="controller")
            result = await self.call(SESSION_ATTACH, params)
            self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
            snapshot = result.snapshot
            if snapshot is not None:
                if after is None:
                    self.renderer = self._new_renderer()
                    shown = snapshot.turns[-HISTORY_TURNS:]
                    if len(snapshot.turns) > len(shown):
                        earlier = len(snapshot.turns) - len(shown)
                        self.note(f"{DIM}({earlier} earlier turn(s) not shown){RESET}")
                    self.renderer.snapshot(snapshot, last_turns=HISTORY_TURNS)
                self.state.from_snapshot(snapshot, time.monotonic())
                self.answerer = ApprovalAnswerer(
                    self.client,
                    session_id,
                    interactive=True,
                    prompt=self.question,
                    say=self.note,
                    bell=self.ring if self.bell else None,
                )
                self.renderer.answered_here = self.answerer.answered
                for approval in snapshot.pending_approvals:
                    self._ask(approval, describe=True)
        finally:
            self._holding = False
        self._drain()
        self.invalidate()

    async def detach(self) -> None:
        session_id = self.state.session_id
        if session_id is None:
            return
        self._forget_session()
        with contextlib.suppress(CallError):  # deleted meanwhile: detached all the same
            await self.call(SESSION_DETACH, SessionRef(session_id=session_id))

    def _forget_session(self) -> None:
        self.lines.flush()
        self.state.reset()
        self.answerer = None
        self.question.question = None
        self.renderer = self._new_renderer()

    async def switch_to(self, session_id: str) -> None:
        if session_id == self.state.session_id:
            self.note(f"tether: already in session {session_id}")
            return
        await self.detach()
        await self._attach(session_id)
        await self._apply_permission_mode()
        self.note(f"tether: attached to session {session_id}")

    async def ensure_session(self) -> str:
        """The attached session, created (with this chat's permission mode) when there is none."""
        if self.state.session_id is not None:
            return self.state.session_id
        created = await self.call(
            SESSION_CREATE, SessionCreateParams(permission_mode=self.permission_mode)
        )
        await self._attach(created.session.id)
        return created.session.id

    async def _apply_permission_mode(self) -> None:
        session_id = self.state.session_id
        if self.permission_mode is None or session_id is None:
            return
        if self.state.permission_mode != self.permission_mode:
            await self.call(
                SESSION_CONFIGURE,
                SessionConfigureParams(session_id=session_id, permission_mode=self.permission_mode),
            )

    # --- input ------------------------------------------------------------------------------

    async def send(self, text: str) -> None:
        session_id = await self.ensure_session()
        images = [ImageInput(name=i.name, mime_type=i.mime_type, data=i.data) for i in self.images]
        started = await self.call(
            TURN_START,
            TurnStartParams(
                session_id=session_id,
                text=text,
                mentions=parse_cli_mentions(text),
                images=images,
                env=without_secrets(os.environ),
            ),
        )
        self.images.clear()
        for problem in started.problems:
            self.note(f"tether: {visible(problem)}")

    async def cancel(self) -> None:
        session_id = self.state.session_id
        if session_id is None or self.state.running_turn is None:
            self.note("tether: no turn is running")
            return
        # Said first: the answer comes once the turn has ended, after its last lines.
        self.note("tether: cancelling the turn")
        try:
            await self.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
        except CallError as exc:
            self.note(f"tether: {visible(exc.message)}")

    def leave(self) -> None:
        self._leaving = True
        if self.prompt is not None and self.prompt.app.is_running:
            self.prompt.app.exit(exception=EOFError())

    async def submit(self, text: str) -> None:
        if not text.strip():
            return
        if text.lstrip().startswith("/"):
            await self._slash(self, text)
            return
        await self.send(text)

    def arguments(self, command: str) -> list[str]:
        """What may follow `command` on the prompt, for completion."""
        if command == "/model":
            return self.models
        if command == "/mode":
            return ["ask", "edits", "auto"]
        if command == "/attach":
            return [s.id for s in self.sessions]
        if command == "/undo":
            return ["force"]
        return []

    async def pick_session(self) -> str | None:
        sessions = await self.call(SESSION_LIST, Empty())
        self.sessions = sessions.sessions
        if not self.sessions:
            self.note("tether: this workspace has no sessions yet")
            return None
        from tether.clients.cli.commands.sessions import describe_session

        now = time.time()
        model = self.state.default_model
        options = [(s.id, describe_session(s, now, model)) for s in self.sessions]
        current = self.state.session_id
        return await pick(options, current=current)

    # --- the loop -----------------------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._report(exc)

    def _report(self, exc: BaseException) -> None:
        if isinstance(exc, CallError):
            self.note(f"tether: {visible(exc.message)}")
        elif isinstance(exc, WebSocketError | OSError):
            self.note(f"tether: lost the connection to the daemon: {exc}")
            self.leave()
        else:
            raise exc

    async def _background(self) -> None:
        """Learn the models (for the status line and completion), then keep the count of
        attached clients fresh."""
        try:
            models = await self.call(MODELS_LIST, Empty())
        except CallError:
            pass  # the provider is not reachable now; the status line says "default model"
        else:
            self.models = [m.id for m in models.models]
            self.state.default_model = models.current
            self.invalidate()
        while True:
            await asyncio.sleep(CLIENTS_REFRESH_S)
            if self.state.session_id is None:
                continue
            self.sessions = (await self.call(SESSION_LIST, Empty())).sessions
            for info in self.sessions:
                if info.id == self.state.session_id:
                    self.state.clients = max(info.clients, 1)
            self.invalidate()

    async def _sender(self) -> None:
        """Send what was typed, in order. The prompt is back at once: typed while a call is
        in flight, keys would otherwise reach a terminal not in raw mode (Enter a newline)."""
        while True:
            text = await self._inputs.get()
            try:
                await self._submit_reporting(text)
            finally:
                self._inputs.task_done()

    async def _submit_reporting(self, text: str) -> None:
        try:
            await self.submit(text)
        except CallError as exc:
            self.note(f"tether: {visible(exc.message)}")
        except (WebSocketError, OSError) as exc:
            self._report(exc)

    async def _ticker(self) -> None:
        """While something is under way, redraw the line that shows it (spinner, times)."""
        while True:
            await asyncio.sleep(TICK_S)
            if self.state.running_turn is not None or self.renderer.activity() is not None:
                self.invalidate()

    async def run(self, session_id: str | None) -> None:
        """Attach to `session_id` (None: a new session, created with the first message) and
        read input until the person leaves."""
        self._loop = asyncio.get_running_loop()
        self._out = sys.stdout
        # Anything else that prints (a library's warning) still goes above the prompt.
        with patch_stdout(raw=True):
            self.client.on_notification = self._wake
            self.prompt = make_prompt(self)
            if session_id is not None:
                await self._attach(session_id)
                await self._apply_permission_mode()
            self.note(f"{DIM}tether · {self.workspace} · /help for commands{RESET}")
            self.spawn(self._background())
            self.spawn(self._ticker())
            self.spawn(self._sender())
            while not self._leaving:
                try:
                    text = await self.prompt.prompt_async()
                except (EOFError, KeyboardInterrupt):
                    break
                if text.strip() in TAKES_THE_TERMINAL:
                    await self._inputs.join()
                    await self._submit_reporting(text)
                else:
                    self._inputs.put_nowait(text)
            await self._inputs.join()  # what was typed before leaving is still sent
            for task in list(self._tasks):
                task.cancel()
            self.lines.flush()
            self._goodbye()

    def _goodbye(self) -> None:
        session_id = self.state.session_id
        if session_id is None:
            return
        if self.state.running_turn is not None:
            self.note(
                f"tether: detached; the turn keeps running in the daemon"
                f" (`tether attach {session_id}` follows it)"
            )
        else:
            self.note(f"tether: left session {session_id} (`tether chat -s {session_id}` resumes)")
