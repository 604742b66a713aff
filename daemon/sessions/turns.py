"""Running the loaded sessions' turns.

Turns run in the daemon's own nursery (`Turns.serve`), not in any client's, so a turn keeps
going when the client that started it disconnects. Each turn has its own cancel scope:
`turn/cancel` cancels it (the turn ends `cancelled`); daemon shutdown cancels it too (the turn
ends `interrupted`). Either way the turn ends with a summary item and `turn_completed`, both
persisted.

One turn runs per session at a time; a message sent while one runs is queued (an
`input_queued` event every client sees, carrying the editor state and mentions read when it
was sent) and joins the conversation at the turn's next step. Messages still queued when a turn
ends without taking them are dropped with an `input_dropped` event. A `session/compact` turn
(`tether.daemon.sessions.compaction`) takes no messages: one sent meanwhile is refused.

Every turn is announced with `turn_started` when it begins (`Turns.begin`) and, once it has
ended, leaves the running set (`Turns.end`), which tells the registry (`on_settle`) that the
session may have become idle.
"""

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import trio

from tether.daemon.config.sandbox import command_sandbox
from tether.daemon.config.settings import (
    Config,
    ConfigError,
    WorkspaceRules,
    load_workspace_rules,
)
from tether.daemon.hooks.notify import Notifier
from tether.daemon.logs.log import bind, get_logger
from tether.daemon.lsp.pool import LspPool
from tether.daemon.mcp.client import McpTool
from tether.daemon.mcp.config import ServerDefinition, merge, read_workspace_servers
from tether.daemon.mcp.pool import McpPool
from tether.daemon.mcp.session_servers import SessionServers
from tether.daemon.procs.env import turn_environment
from tether.daemon.procs.sandbox import Sandbox, sandbox_problem
from tether.daemon.procs.table import ProcessTable
from tether.daemon.sessions.images import ImageStore
from tether.daemon.sessions.input import TurnInput, TurnRequest
from tether.daemon.sessions.loaded import LoadedSession
from tether.daemon.sessions.models import ModelSource
from tether.daemon.sessions.provider_choice import provider_for
from tether.daemon.sessions.session import Session, new_id, root_of
from tether.daemon.sessions.sink import Sink
from tether.daemon.sessions.titles import automatic_title
from tether.daemon.sessions.turn_parts import TurnParts
from tether.daemon.skills.catalog import catalog
from tether.daemon.skills.library import SkillLibrary, protected_folders
from tether.daemon.tools.base import ChangeTracker, NoChanges
from tether.daemon.tools.builtin import skill_tools
from tether.daemon.tools.mcp import mcp_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.run_command import PROCESSES_SERVICE
from tether.daemon.turn.loop import TurnLoop, TurnOutcome, split_cancelled
from tether.daemon.worktrees.worktree import git_folders
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    InputQueued,
    ItemCompleted,
    ItemStarted,
    SessionRenamed,
    ToolProgress,
    TurnEndStatus,
    TurnEnvironment,
    TurnError,
    TurnStarted,
    Usage,
)
from tether.protocol.items import UserMessage
from tether.protocol.methods import TurnStartResult

log = get_logger(__name__)

ChangeTrackerFactory = Callable[[Session, str], ChangeTracker]
"""Makes the change tracker of a session's turn (given its id)."""


class RunningTurn:
    def __init__(
        self,
        turn_id: str,
        *,
        compaction: bool = False,
        client_env: Mapping[str, str] | None = None,
        shell_env: Mapping[str, str] | None = None,
    ) -> None:
        self.turn_id = turn_id
        self.compaction = compaction
        """A `session/compact` turn, which takes no queued messages."""
        self.client_env = client_env
        """The provider variables of the client that started it (None: it sent none)."""
        self.shell_env = shell_env
        """The environment its commands and hooks run in (None: the daemon's)."""
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.interrupted = False
        """Cancelled by a daemon shutdown rather than by a client."""
        self.started = time.monotonic()

    def ended_by_cancel(self) -> TurnEndStatus:
        """The status of the turn once its scope was cancelled."""
        return "interrupted" if self.interrupted else "cancelled"


class Turns:
    """The running turns of the loaded sessions, at most one per session."""

    def __init__(
        self,
        *,
        workspace: Path,
        models: ModelSource,
        tools: ToolRegistry,
        on_settle: Callable[[str], None],
        services: Mapping[str, object] | None = None,
        change_tracker: ChangeTrackerFactory | None = None,
        lsp: LspPool | None = None,
        on_turn_end: Callable[[], None] | None = None,
        skills: SkillLibrary | None = None,
        mcp: McpPool | None = None,
        images: ImageStore | None = None,
    ) -> None:
        """`models` gives each turn the user's settings as they are when it starts (the
        model client, the permission rules, `max_steps`, the context window);
        `on_settle(session_id)` is called whenever a session's turn starts or ends;
        `services` are handed to tools (the process table, …); `change_tracker` records a
        turn's file changes (default: nothing); `lsp` reports diagnostics after edits (None:
        no diagnostics); `on_turn_end` is called after every turn; `skills` are read again at
        each turn's start: while there are any, the system prompt ends with their catalog and
        the `skill` tool follows `tools` (None: no skills); `mcp` runs the MCP servers whose
        tools follow those (None: none); `images` keeps the images tools return (None: tools
        return text only)."""
        self.workspace = workspace
        self.images = images
        self.mcp = mcp
        self.session_mcp = SessionServers(mcp) if mcp is not None else None
        """The MCP servers clients gave single sessions (`session/configure`)."""
        self._mcp_reported: set[str] = set()
        self._sandbox_reported: dict[str, str] = {}
        """The sandbox problem each session was last told of."""
        self.models = models
        self.tools = tools
        self.skills = skills
        self._with_skills = tools.extended(skill_tools(skills)) if skills is not None else tools
        self._protected = protected_folders(
            workspace, skills.user_folder if skills is not None else None
        )
        self.services: Mapping[str, object] = services or {}
        self.change_tracker: ChangeTrackerFactory = change_tracker or (
            lambda _session, _turn: NoChanges()
        )
        self.lsp = lsp
        self._on_settle = on_settle
        self.last_environment: TurnEnvironment | None = None
        """The environment of the turn started last (None: none yet)."""
        self._on_turn_end = on_turn_end or (lambda: None)
        table = self.services.get(PROCESSES_SERVICE)
        self.notifier = Notifier(owned=table.owned if isinstance(table, ProcessTable) else None)
        """The turns' notifications (`tether.daemon.sessions.notifications`)."""
        self._running: dict[str, RunningTurn] = {}
        self._nursery: trio.Nursery | None = None
        self.accepting = True

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the turns until cancelled, which interrupts every running turn."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.notifier.serve)
            if self.session_mcp is not None:
                await nursery.start(self.session_mcp.serve)
            if self.skills is not None:
                # Read once now, so that a first turn finds the skills parsed (PyYAML loaded).
                nursery.start_soon(self._read_skills, self.skills)
            task_status.started()
            await trio.sleep_forever()

    @staticmethod
    async def _read_skills(skills: SkillLibrary) -> None:
        try:
            await trio.to_thread.run_sync(skills.refresh)
        except Exception:  # a turn's start reads them again, and says what goes wrong there
            log.exception("reading the skills failed")

    @property
    def count(self) -> int:
        return len(self._running)

    def current_tools(self) -> ToolRegistry:
        """The tools a turn starting now would offer, as of the skills' last reading and the
        MCP servers' last tool lists."""
        tools = self._base_tools()
        offered = self.mcp.offered() if self.mcp is not None else []
        return tools.extended(mcp_tools(offered, self._call_mcp)) if offered else tools

    def _base_tools(self) -> ToolRegistry:
        return self._with_skills if self.skills is not None and self.skills.current else self.tools

    async def _call_mcp(
        self,
        server: str,
        tool: str,
        arguments: dict[str, object],
        on_progress: Callable[[ToolProgress], None],
    ) -> dict[str, object]:
        assert self.mcp is not None
        return await self.mcp.call(server, tool, arguments, on_progress)

    async def _with_mcp(
        self, live: LoadedSession, config: Config, sink: "Sink", tools: ToolRegistry
    ) -> ToolRegistry:
        """`tools` followed by the running MCP servers' tools, the servers started first (see
        `tether.daemon.mcp.pool`), with a notice for problems not reported before."""
        if self.mcp is None:
            return tools
        found = await trio.to_thread.run_sync(read_workspace_servers, self.workspace)
        definitions, problems = merge(config.mcp_servers, found)
        self.mcp.configure(definitions)
        problems += await self.mcp.ensure_started()
        problems += [
            f"The workspace's {d.origin} defines the MCP server {d.name}; it runs a program the "
            f"repository chose, so it starts only once you approve it (`tether mcp approve "
            f"{d.name}`)" + (f": {why}" if why != "not approved yet" else "")
            for d, why in self.mcp.awaiting_approval()
        ]
        own: list[tuple[ServerDefinition, McpTool]] = []
        if self.session_mcp is not None:
            taken = {d.name for d in definitions}
            own, own_problems = await self.session_mcp.ensure_started(live.session.id, taken)
            problems += own_problems
        new = [problem for problem in problems if problem not in self._mcp_reported]
        self._mcp_reported = set(problems)
        if new:
            sink.notice("warning", "mcp", ".\n".join(new) + ".")
        offered = self.mcp.offered()
        if not offered and not own:
            return tools
        tools = tools.extended(mcp_tools(offered, self._call_mcp))
        if self.session_mcp is not None and own:
            tools = tools.extended(mcp_tools(own, self.session_mcp.caller(live.session.id)))
        live.context.use_tools(tools.toolset)
        return tools

    async def _sandbox(self, config: Config, sink: "Sink", root: Path) -> Sandbox | None:
        """The sandbox this turn's commands run in, writing in `root` (None: off). When it
        cannot be made, the session is told (once per problem): its commands will fail rather
        than run unconfined."""
        sandbox = command_sandbox(config, root)
        if sandbox is not None and sink.session.worktree is not None:
            folders = await trio.to_thread.run_sync(git_folders, root)
            sandbox = dataclasses.replace(sandbox, writable=(*sandbox.writable, *folders))
        session_id = sink.session.id
        found = (
            await trio.to_thread.run_sync(sandbox_problem, sandbox) if sandbox is not None else ""
        )
        if found and self._sandbox_reported.get(session_id) != found:
            sink.notice("error", "sandbox", f"Commands will not run: {found}.")
        if found:
            self._sandbox_reported[session_id] = found
        else:
            self._sandbox_reported.pop(session_id, None)
        return sandbox

    def running(self, session_id: str) -> RunningTurn | None:
        return self._running.get(session_id)

    def check_accepting(self) -> None:
        """SHUTTING_DOWN unless new turns may start."""
        if not self.accepting or self._nursery is None:
            raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")

    def begin(
        self,
        session: Session,
        *,
        compaction: bool = False,
        client_env: Mapping[str, str] | None = None,
        shell_env: Mapping[str, str] | None = None,
    ) -> RunningTurn:
        """Mark a new turn of `session` as running and announce it (`turn_started`, with the
        environment its commands run in unless it is a compaction)."""
        turn_id = new_id("t")
        running = self._running[session.id] = RunningTurn(
            turn_id, compaction=compaction, client_env=client_env, shell_env=shell_env
        )
        self._on_settle(session.id)
        environment = None
        if not compaction:
            environment = self.last_environment = turn_environment(shell_env)
            log.info(
                "turn environment",
                session=session.id,
                turn=turn_id,
                source=environment.source,
                virtual_env=environment.virtual_env,
            )
        session.emit(TurnStarted(turn_id=turn_id, started_at=time.time(), environment=environment))
        return running

    def end(self, session: Session, running: RunningTurn) -> None:
        """Take a turn that has emitted `turn_completed` off the running set."""
        del self._running[session.id]
        running.done.set()
        self._on_turn_end()
        self._on_settle(session.id)

    def start(self, live: LoadedSession, request: TurnRequest) -> TurnStartResult:
        """Start a turn, or queue the message for the running one. Problems with what goes with
        it are returned to the caller. `request.permission_mode` and `.model` change the
        session's settings first (see `Session.configure`); `request.client_env` is what a new
        turn's settings are read with (a queued message joins a turn that has its settings
        already)."""
        self.check_accepting()
        assert self._nursery is not None
        session = live.session
        if session.worktree is not None and not Path(session.worktree.root).is_dir():
            raise RpcError(
                ErrorCode.WORKTREE_FAILED,
                f"the worktree of session {session.id} ({session.worktree.root}) is gone;"
                " its turns cannot run (`tether worktrees --prune` forgets it)",
            )
        running = self._running.get(session.id)
        if running is not None and running.compaction:
            # Queued, it would wait for some later turn: refused, the client still has it.
            raise RpcError(
                ErrorCode.SESSION_BUSY, "the session is being compacted; send it again after"
            )
        text = request.text
        sent = request.turn_input or TurnInput()
        if request.turn_input is not None:
            live.read_instructions = request.turn_input.instructions
        live.mentioned.update(sent.files)
        session.configure(permission_mode=request.permission_mode, model=request.model)
        problems = list(sent.problems)
        images = [image.ref for image in sent.images]
        for image in sent.images:
            live.history.image_data[image.ref.sha256] = image.data
        if running is not None:
            input_id = new_id("i")
            session.emit(
                InputQueued(
                    input_id=input_id,
                    text=text,
                    by=request.by,
                    context=sent.context,
                    images=images,
                )
            )
            return TurnStartResult(
                turn_id=running.turn_id, queued=True, input_id=input_id, problems=problems
            )
        running = self.begin(session, client_env=request.client_env, shell_env=request.shell_env)
        if not session.title:
            session.emit(SessionRenamed(title=automatic_title(text)))
        context = live.with_instructions(sent.context)
        item = UserMessage(id=new_id("i"), text=text, context=context, images=images)
        session.emit(ItemStarted(turn_id=running.turn_id, item=item))
        session.emit(ItemCompleted(turn_id=running.turn_id, item=item))
        live.history.add_user(text, context, images)
        self._nursery.start_soon(self._run, live, running)
        return TurnStartResult(turn_id=running.turn_id, input_id=item.id, problems=problems)

    def cancel(self, session: Session, turn_id: str | None) -> str:
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

    def _tools_for(self, live: LoadedSession) -> ToolRegistry:
        """The tools of a turn of `live` starting now; puts the skills catalog (as the skills
        were last read, ordered by the session's files in play) at the end of its system
        prompt, or takes it away. The MCP servers' tools join later (`_with_mcp`)."""
        tools = self._base_tools()
        skills = self.skills.current.skills if self.skills is not None else ()
        live.use_catalog(catalog(skills, live.files_in_play(root_of(live.session, self.workspace))))
        live.context.use_tools(tools.toolset)
        return tools

    async def _run(self, live: LoadedSession, running: RunningTurn) -> None:
        session = live.session
        turn_id = running.turn_id
        # The turn outlives the connection that started it: its lines carry no connection.
        bind(conn=None, session=session.id, turn=turn_id)
        log.info("turn started")
        sink = Sink(live, turn_id)
        root = root_of(session, self.workspace)
        if self.lsp is not None and root != self.workspace:
            self.lsp.add_project(root)
        parts = TurnParts(
            live,
            turn_id,
            sink,
            workspace=root,
            models=self.models,
            changes=self.change_tracker(session, turn_id),
            services=self.services,
            protected=self._protected
            if root == self.workspace
            else protected_folders(root, self.skills.user_folder if self.skills else None),
            lsp=self.lsp,
            images=self.images,
            env=running.shell_env,
            notifier=self.notifier,
        )
        # Read once per turn, off the event loop: the rules and the notice come from one read.
        # Shielded (a worker thread cannot be interrupted anyway), so that no cancellation
        # lands before the `try` that ends every turn with its summary.
        rules = WorkspaceRules()
        with trio.CancelScope(shield=True):
            rules = await trio.to_thread.run_sync(load_workspace_rules, root)
            if self.skills is not None:
                await trio.to_thread.run_sync(self.skills.refresh)
        tools = self._tools_for(live)
        ignored = rules.ignored
        if ignored:
            sink.notice(
                "warning",
                "workspace_config",
                "Ignored settings in the workspace's .tether/config.toml that only your own "
                f"config may set: {', '.join(ignored)}.",
            )
        outcome: TurnOutcome | None = None
        loop: TurnLoop | None = None
        status: TurnEndStatus = "interrupted"
        error: TurnError | None = None
        try:
            with running.scope:
                try:
                    config = await self.models.settings(running.client_env)
                except ConfigError as exc:
                    outcome = config_failure(sink, exc)
                else:
                    parts.sandbox = await self._sandbox(config, sink, root)
                    parts.shell = config.shell
                    tools = await self._with_mcp(live, config, sink, tools)
                    async with self.models.lease(provider_for(session, config)) as model:
                        loop = parts.loop(config, model, rules, tools)
                        if parts.hooks is not None and len(session.turns) == 1:
                            await parts.hooks.session_start()
                        outcome = await loop.run()
            if outcome is None:
                status = running.ended_by_cancel()
            else:
                status, error = outcome.status, outcome.error
            if parts.hooks is not None:
                # Here, not in `finally`: a daemon stopping cancels it, and the turn still
                # ends with its summary.
                await parts.hooks.turn_end(status)
        except BaseException as exc:
            # Cancellation can arrive as a group (from a nursery inside a tool), alone or
            # beside a bug's exception: it decides the status; a bug is logged.
            cancelled, errors = split_cancelled(exc)
            if errors is not None:
                log.exception("the turn failed", exc=errors)
            if running.scope.cancel_called:
                status = running.ended_by_cancel()
            elif errors is not None:
                status = "failed"
                error = TurnError(code="internal_error", message=f"tether failed: {errors!r}")
            # else: cancelled from outside the turn (the daemon is going away): interrupted.
            if cancelled is exc:
                raise
            if cancelled is not None:
                raise cancelled from None
        finally:
            parts.announce_end(status, error, started=running.started, loop=loop, outcome=outcome)
            if parts.notifications is not None:
                parts.notifications.turn_ended(turn_id, status, error)
            self.end(session, running)


def config_failure(sink: Sink, exc: ConfigError) -> TurnOutcome:
    """How a turn ends when the user's config cannot be read: failed, saying what to fix."""
    message = f"Your tether settings are invalid: {exc}. Fix it and send again; nothing ran."
    sink.notice("error", "config_invalid", message)
    return TurnOutcome(
        status="failed", usage=Usage(), error=TurnError(code="config_invalid", message=message)
    )
