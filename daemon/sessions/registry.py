"""The daemon's sessions: creating, loading, unloading, listing and deleting them, and the way
in to their turns (run by `tether.daemon.sessions.turns`).

Loaded sessions are a cache of the store. A session with no subscriber and no running turn
(so no pending approval) is idle; the `keep_idle` most recently idle ones stay loaded, older
ones are unloaded. The store holds every persisted event, so loading one again rebuilds the
same items, in a new epoch as after a restart: a client's cursor into the old epoch gets a
snapshot. What is not persisted goes with it (`tether.daemon.sessions.loaded`): the replay
ring, the edit guard's read versions (the agent reads a file again before editing it) and the
provider's last token count (the meter estimates until the next model call).

`delete` refuses a session with a running turn (SESSION_BUSY). Otherwise it drops the session
from memory first (so no new turn can start on it), detaches its subscribers with a
`session/deleted` notification, then deletes it from the store.
"""

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeGuard

import trio

from tether.daemon.config.settings import Config, ConfigError, PermissionsConfig, ProviderConfig
from tether.daemon.context.history import History
from tether.daemon.context.prompt import system_prompt
from tether.daemon.hooks.notify import Notifier
from tether.daemon.lsp.pool import LspPool
from tether.daemon.mcp.pool import McpPool
from tether.daemon.mcp.session_servers import SessionServers
from tether.daemon.providers.base import ModelClient
from tether.daemon.sessions.approvals import ApprovalBroker
from tether.daemon.sessions.context import SessionContext
from tether.daemon.sessions.images import ImageStore
from tether.daemon.sessions.input import TurnInput, TurnRequest, read_turn_input
from tether.daemon.sessions.loaded import LoadedSession
from tether.daemon.sessions.models import FixedModel, ModelSource
from tether.daemon.sessions.notifications import has_controller
from tether.daemon.sessions.provider_choice import images_unsupported, provider_named
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import (
    Session,
    fork_origin,
    new_id,
    root_of,
    state_after,
    worktree_of,
)
from tether.daemon.sessions.store import Store
from tether.daemon.sessions.turns import ChangeTrackerFactory, Turns
from tether.daemon.sessions.worktrees import (
    check_merged,
    make_worktree,
    remove_worktree,
    removed_unless_stored,
    worktree_entries,
)
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    ApprovalRequest,
    ContextMeter,
    PermissionMode,
    TurnEnvironment,
)
from tether.protocol.items import ToolCall, UserMessage
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import (
    Attachment,
    EditorContext,
    ImageInput,
    SessionCompactResult,
    SessionDeletedParams,
    SessionModel,
    TurnStartResult,
)
from tether.protocol.session import SessionInfo

KEEP_IDLE = 8
"""Idle sessions kept loaded (the most recently used); older idle ones are unloaded."""


class Sessions:
    def __init__(
        self,
        *,
        store: Store,
        workspace: Path,
        tools: ToolRegistry,
        models: ModelSource | None = None,
        model: ModelClient | None = None,
        max_steps: int = 60,
        permissions: PermissionsConfig | None = None,
        context_window: int = 65536,
        max_output_tokens: int = 8192,
        keep_idle: int = KEEP_IDLE,
        services: Mapping[str, object] | None = None,
        change_tracker: ChangeTrackerFactory | None = None,
        lsp: LspPool | None = None,
        on_turn_end: Callable[[], None] | None = None,
        model_named: Callable[[str], ModelClient] | None = None,
        skills: SkillLibrary | None = None,
        mcp: McpPool | None = None,
        images: ImageStore | None = None,
    ) -> None:
        """`models` gives each turn the user's settings and its model client; without it,
        every turn calls `model` (and `model_named(name)` for a session's own model) with
        `max_steps`, the permission rules of `permissions` and the budget of
        `context_window` and `max_output_tokens` (tests bring their own client this way).
        `permissions.mode` is the default mode of new sessions either way. `services` are
        handed to tools (the process table, …); `change_tracker` records each turn's file
        changes (default: nothing); `lsp` reports diagnostics after edits (None: no
        diagnostics); `on_turn_end` is called after every turn; `skills` are the workspace's
        and the user's skills (None: none); `images` keeps the bytes of images sent in
        messages (default: `images/` beside the store's database)."""
        if keep_idle < 1:
            raise ValueError("keep_idle must be at least 1: a session just looked up stays loaded")
        self.keep_idle = keep_idle
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.store = store
        self.workspace = workspace
        self.tools = tools
        self.skills = skills
        self.permissions = permissions or PermissionsConfig()
        if models is None:
            if model is None:
                raise ValueError("Sessions needs `models` or a `model`")
            fixed = Config(
                provider=ProviderConfig(
                    context_window=context_window, max_output_tokens=max_output_tokens
                ),
                permissions=self.permissions,
                max_steps=max_steps,
            )
            models = FixedModel(model, fixed, model_named)
        self.models: ModelSource = models
        self.images = images or ImageStore(store.path.parent / "images")
        """The bytes of the images sent in messages (`tether.daemon.sessions.images`)."""
        self._live: dict[str, LoadedSession] = {}
        self._idle: dict[str, None] = {}
        """Loaded sessions that were idle when last settled, least recently used first."""
        self._loading: dict[str, trio.Event] = {}
        self.checkout_lock = trio.Lock()
        """Held while git changes the workspace's checkout or its worktrees (merge, prune,
        a worktree's removal): two at once would trip over git's locks, and one's clean-up
        could undo the other's merge."""
        self._turns = Turns(
            workspace=workspace,
            models=models,
            tools=tools,
            on_settle=self._settle,
            services=services,
            change_tracker=change_tracker,
            lsp=lsp,
            on_turn_end=on_turn_end,
            skills=skills,
            mcp=mcp,
            images=self.images,
        )

    def stop_accepting(self) -> None:
        """Refuse new turns from now on (SHUTTING_DOWN); running ones go on."""
        self._turns.accepting = False

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the turns. Marks turns a previous daemon left running as interrupted, then
        reports ready. Cancelling this interrupts every running turn."""
        for session_id in await self.store.sessions_with_running_turn():
            await self.get(session_id)
        await self._turns.serve(task_status=task_status)

    # --- lookup ---------------------------------------------------------------------------

    @property
    def loaded_count(self) -> int:
        return len(self._live)

    @property
    def running_count(self) -> int:
        return self._turns.count

    @property
    def last_turn_environment(self) -> TurnEnvironment | None:
        """The environment of the turn started last (None: none since the daemon started)."""
        return self._turns.last_environment

    @property
    def notifier(self) -> Notifier:
        """The turns' notifications (`tether.daemon.hooks.notify`)."""
        return self._turns.notifier

    @property
    def mcp(self) -> McpPool | None:
        return self._turns.mcp

    @property
    def session_mcp(self) -> SessionServers | None:
        """The MCP servers clients gave single sessions."""
        return self._turns.session_mcp

    def current_tools(self) -> ToolRegistry:
        """The tools a turn starting now would offer (`skill` only while skills exist)."""
        return self._turns.current_tools()

    async def _system_prompt(self, root: Path) -> str:
        """The system prompt for a session being created or loaded, working in `root`. Built
        per session (the git branch and the top-level entries change while the daemon runs),
        in a worker thread (it reads the file system)."""
        return await trio.to_thread.run_sync(system_prompt, root)

    async def create(
        self,
        title: str = "",
        permission_mode: PermissionMode | None = None,
        model: str | None = None,
        *,
        isolation: Literal["none", "worktree"] = "none",
        base_ref: str = "",
    ) -> Session:
        """A new session; with `isolation="worktree"` it works in a new git worktree made from
        `base_ref` (default `HEAD`), and WORKTREE_FAILED says why one cannot be made.

        A worktree session is stored before this returns, so a daemon killed right after
        never leaves a worktree that no session owns; when storing fails or the call is
        cancelled, the worktree is removed again."""
        now = time.time()
        row = SessionRow(new_id("s"), title, now, now, 0, None)
        if isolation != "worktree":
            if base_ref:
                raise RpcError(ErrorCode.INVALID_PARAMS, '`base_ref` needs `isolation: "worktree"`')
            prompt = await self._system_prompt(self.workspace)
            self.store.create_session_nowait(row)
            return self._go_live(row, prompt, permission_mode, model)
        made = await make_worktree(
            self.workspace, self.store.path.parent, row.id, title, base_ref or "HEAD"
        )
        async with removed_unless_stored(self.workspace, made):
            row.worktree_root, row.worktree_branch, row.worktree_base = (
                made.root,
                made.branch,
                made.base,
            )
            prompt = await self._system_prompt(Path(made.root))
            await self.store.create_session(row)
        return self._go_live(row, prompt, permission_mode, model)

    def _go_live(
        self,
        row: SessionRow,
        prompt: str,
        permission_mode: PermissionMode | None,
        model: str | None,
    ) -> Session:
        session = Session(row, self.store, permission_mode=self.permissions.mode)
        session.configure(permission_mode=permission_mode, model=model)
        self._live[session.id] = self._make_live(session, History(prompt))
        self._settle(session.id)
        return session

    def _make_live(self, session: Session, history: History) -> LoadedSession:
        context = SessionContext(
            session,
            history,
            None,
            self.tools.toolset,
            window=self.context_window,
            max_output=self.max_output_tokens,
        )
        # By id: a closure over the session would be a reference cycle, and an unloaded
        # session would then wait for the cycle collector instead of being freed at once.
        session_id = session.id
        session.on_subscribers = lambda: self._settle(session_id)
        return LoadedSession(session, history, context)

    def _unloadable(self, live: LoadedSession) -> bool:
        session = live.session
        return (
            not session.subscribers
            and self._turns.running(session.id) is None
            and not session.pending_approvals
        )

    def _settle(self, session_id: str) -> None:
        """Note that a loaded session was used, may have become idle, or its clients changed
        (a controller attached sees its pending notifications): an idle one becomes
        the most recently idle, a busy one leaves the idle list, and idle sessions beyond the
        `keep_idle` most recent are unloaded. Synchronous, so no task sees half of it."""
        self._idle.pop(session_id, None)
        if self._turns.session_mcp is not None:
            self._turns.session_mcp.release(session_id)
        live = self._live.get(session_id)
        if live is not None and has_controller(live.session):
            self._turns.notifier.seen(session_id)
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

    async def _get_live(self, session_id: str) -> LoadedSession:
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
                history = History(await self._system_prompt(root_of(session, self.workspace)))
                digests = [
                    image.sha256
                    for item in session.items()
                    if isinstance(item, UserMessage | ToolCall)
                    for image in item.images
                ]
                if digests:
                    history.image_data = await trio.to_thread.run_sync(
                        self.images.load, session_id, digests
                    )
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

    def chosen_models(self) -> list[SessionModel]:
        """The loaded sessions that chose a model of their own."""
        return [
            SessionModel(
                session_id=live.session.id,
                model=live.session.model,
                running=self._turns.running(live.session.id) is not None,
            )
            for live in self._live.values()
            if live.session.model
        ]

    async def delete(self, session_id: str, *, by: str = "", force: bool = False) -> None:
        """Delete the session and everything stored for it, its worktree too. SESSION_BUSY
        while a turn (or a compaction) runs, SESSION_NOT_FOUND when there is no such session,
        WORKTREE_UNMERGED when its worktree holds changes not merged (unless `force`); a store
        failure raises `StoreError` and leaves the session in the store.

        Cancellation: once the store has the delete queued it happens; cancelling only stops
        waiting for it."""
        while (loading := self._loading.get(session_id)) is not None:
            await loading.wait()
        if self._turns.running(session_id) is not None:
            raise RpcError(
                ErrorCode.SESSION_BUSY,
                f"session {session_id} has a running turn; cancel it or wait for it to end",
            )
        row = await self.store.get_session(session_id)
        worktree = None if row is None else worktree_of(row)
        if worktree is not None:
            if not force:
                await check_merged(self.workspace, session_id, worktree)
            if self._turns.running(session_id) is not None:
                raise RpcError(ErrorCode.SESSION_BUSY, f"session {session_id} started a turn")
            async with self.checkout_lock:
                await remove_worktree(self.workspace, worktree)
        live = self._live.pop(session_id, None)
        if live is not None:
            frame = notification_frame(
                "session/deleted", SessionDeletedParams(session_id=session_id, by=by)
            )
            for subscriber in list(live.session.subscribers):
                subscriber.send_nowait(frame)
            live.session.subscribers.clear()
        if self._turns.session_mcp is not None:
            await self._turns.session_mcp.drop(session_id)
        if not await self.store.delete_session(session_id) and live is None:
            raise RpcError(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")
        await trio.to_thread.run_sync(self.images.delete_session, session_id)

    async def prune_worktrees(self) -> list[str]:
        """Remove the worktrees that are merged (or changed nothing) of sessions with no
        running turn, and let git forget folders removed by hand; the ids of the sessions
        whose worktrees were removed. The sessions stay, without a folder to work in."""
        removed: list[str] = []
        async with self.checkout_lock:
            for entry in await worktree_entries(self.workspace, await self.list()):
                if entry.missing or not entry.merged or self._turns.running(entry.session_id):
                    continue
                await remove_worktree(self.workspace, entry.worktree)
                removed.append(entry.session_id)
        return removed

    async def list(self) -> list[SessionInfo]:
        rows = await self.store.list_sessions()
        infos: list[SessionInfo] = []
        for row in rows:
            live = self._live.get(row.id)
            if live is not None:
                infos.append(live.session.info())
            else:
                mode = row.permission_mode
                infos.append(
                    SessionInfo(
                        id=row.id,
                        title=row.title,
                        created_at=row.created_at,
                        updated_at=row.updated_at,
                        turn_count=row.turn_count,
                        permission_mode=mode if _is_mode(mode) else self.permissions.mode,
                        model=row.model,
                        state=state_after(row.last_status),
                        forked_from=fork_origin(row),
                        worktree=worktree_of(row),
                    )
                )
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos

    # --- approvals ------------------------------------------------------------------------

    async def broker(self, session_id: str) -> ApprovalBroker:
        return (await self._get_live(session_id)).broker

    def pending_approvals(self) -> Sequence[tuple[Session, ApprovalRequest]]:
        """Every pending approval with its session, oldest first. Only loaded sessions are
        looked at: one with a pending approval has a running turn, so it is never unloaded."""
        pending = [
            (live.session, approval)
            for live in self._live.values()
            for approval in live.session.pending_approvals.values()
        ]
        pending.sort(key=lambda entry: entry[1].requested_at)
        return pending

    # --- turns ----------------------------------------------------------------------------

    async def turn_input(
        self,
        *,
        editor: EditorContext | None,
        mentions: Sequence[str],
        attachments: Sequence[Attachment] = (),
        images: Sequence[ImageInput] = (),
        session: Session | None = None,
        model: str | None = None,
        client_env: Mapping[str, str] | None = None,
    ) -> TurnInput:
        """Read what goes with a user's message (`tether.daemon.sessions.input`). Reads files
        only; `start_turn` decides what joins the history.

        With images (the client's, or mentioned image files) for `session`, its model (or
        `model`, which the message switches it to) must take images, else IMAGES_UNSUPPORTED
        before anything is sent; they are made fit for its provider and kept in the image
        store. Settings that cannot be read are left for the turn to report."""
        dialect = "openai"
        accepts: tuple[bool, str] | None = None
        if session is not None and (images or mentions):
            try:
                config = await self.models.settings(client_env)
            except ConfigError:
                pass
            else:
                # `model` "" is a switch back to the configured model, None no switch.
                provider = provider_named(config, session.model if model is None else model)
                dialect = provider.kind
                accepts = (bool(provider.images), provider.model)
        if images and accepts is not None and not accepts[0]:
            # Refused before the images are decoded or resized: that work would be wasted.
            raise RpcError(ErrorCode.IMAGES_UNSUPPORTED, images_unsupported(accepts[1]))
        sent = await read_turn_input(
            self.workspace if session is None else root_of(session, self.workspace),
            editor=editor,
            mentions=mentions,
            attachments=attachments,
            images=images,
            dialect=dialect,
        )
        if sent.images and session is not None:
            if accepts is not None and not accepts[0]:
                raise RpcError(ErrorCode.IMAGES_UNSUPPORTED, images_unsupported(accepts[1]))
            for image in sent.images:
                await trio.to_thread.run_sync(
                    self.images.save, session.id, image.ref.sha256, image.data
                )
        return sent

    async def compact(
        self, session: Session, client_env: Mapping[str, str] | None = None
    ) -> SessionCompactResult:
        """Summarise the session's older history now (`session/compact`), as a turn of its
        own (see `tether.daemon.sessions.compaction`); `client_env` is the asking client's
        provider variables."""
        self._turns.check_accepting()
        # Imported on first use: manual compaction is rare, and a first turn does without it.
        from tether.daemon.sessions.compaction import compact

        return await compact(self._turns, self._live_of(session), client_env)

    def start_turn(self, session: Session, request: TurnRequest) -> TurnStartResult:
        """Start a turn, or queue the message for the running one (see
        `tether.daemon.sessions.turns`); problems with what goes with it are returned to the
        caller."""
        self._turns.check_accepting()
        return self._turns.start(self._live_of(session), request)

    def _live_of(self, session: Session) -> LoadedSession:
        live = self._live.get(session.id)
        if live is None or live.session is not session:
            # Callers look a session up again after any await, so an unloaded session here was
            # deleted meanwhile.
            raise RpcError(ErrorCode.SESSION_NOT_FOUND, f"session {session.id} was deleted")
        return live

    def cancel_turn(self, session: Session, turn_id: str | None) -> str:
        return self._turns.cancel(session, turn_id)

    async def interrupt_all(self) -> None:
        """Stop every running turn (they end `interrupted`) and wait until they have."""
        await self._turns.interrupt_all()

    async def wait_idle(self, session_id: str) -> None:
        """Return once the session runs no turn (at once if it runs none): how an in-process
        caller waits for a turn it started to end."""
        await self._turns.wait_idle(session_id)


def _is_mode(text: str | None) -> TypeGuard[PermissionMode]:
    return text in ("ask", "edits", "auto")
