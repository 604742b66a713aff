"""The daemon's JSON-RPC methods: one coroutine per `Method` descriptor of the protocol, each
registered with `on` so the type checker holds it to its method's params and result."""

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Protocol

import trio

from tether.daemon.config import paths
from tether.daemon.config.sandbox import command_sandbox
from tether.daemon.config.settings import ConfigError
from tether.daemon.config.vision import takes_images
from tether.daemon.context.input_size import input_refusal
from tether.daemon.logs.log import add_secret, get_logger
from tether.daemon.lsp.pool import LspPool
from tether.daemon.mcp.config import merge, read_workspace_servers
from tether.daemon.mcp.pool import McpPool
from tether.daemon.mcp.session_servers import definitions_of
from tether.daemon.procs.sandbox import sandbox_problem
from tether.daemon.procs.table import ProcessTable
from tether.daemon.providers.base import ModelError
from tether.daemon.rpc.connection import Connection, Handler, Reply, on
from tether.daemon.rpc.file_read import read_window
from tether.daemon.sessions.hooks import list_hooks
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.provider_choice import provider_named
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session, root_of
from tether.daemon.sessions.skills import list_skills
from tether.daemon.workspace_trust import WorkspaceTrust
from tether.protocol.environment import without_secrets
from tether.protocol.error_data import ModelUnavailable
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import (
    APPROVAL_LIST,
    APPROVAL_RESPOND,
    CLIENT_NOTIFICATIONS,
    DAEMON_SHUTDOWN,
    DAEMON_STATUS,
    FILE_READ,
    HOOKS_LIST,
    IMAGE_READ,
    INITIALIZE,
    LSP_STATUS,
    MCP_APPROVE,
    MCP_STATUS,
    METHODS,
    MODELS_LIST,
    NOTIFICATIONS,
    PROCESS_KILL,
    PROCESS_LIST,
    PROCESS_OUTPUT,
    SESSION_ATTACH,
    SESSION_COMPACT,
    SESSION_CONFIGURE,
    SESSION_CREATE,
    SESSION_DELETE,
    SESSION_DETACH,
    SESSION_DIFF,
    SESSION_EVENTS,
    SESSION_FORK,
    SESSION_LIST,
    SESSION_MERGE,
    SESSION_READ,
    SESSION_RENAME,
    SESSION_SEARCH,
    SESSION_UNDO,
    SKILLS_LIST,
    TOOLS_LIST,
    TURN_CANCEL,
    TURN_START,
    WORKSPACE_TRUST,
    WORKTREE_LIST,
    WORKTREE_PRUNE,
    ApprovalListResult,
    ApprovalRespondParams,
    DaemonCapabilities,
    DaemonStatusResult,
    Empty,
    FileReadParams,
    FileReadResult,
    HooksListResult,
    ImageReadParams,
    ImageReadResult,
    InitializeParams,
    InitializeResult,
    LspStatusResult,
    McpApproveParams,
    McpApproveResult,
    McpStatusResult,
    ModelInfo,
    ModelsListResult,
    PendingApproval,
    ProcessKillParams,
    ProcessListResult,
    ProcessOutputParams,
    ProcessOutputResult,
    SessionAttachParams,
    SessionAttachResult,
    SessionCompactResult,
    SessionConfigureParams,
    SessionConfigureResult,
    SessionCreateParams,
    SessionCreateResult,
    SessionDeleteParams,
    SessionDiffResult,
    SessionEventsParams,
    SessionEventsResult,
    SessionForkParams,
    SessionForkResult,
    SessionListResult,
    SessionMergeParams,
    SessionMergeResult,
    SessionReadResult,
    SessionRef,
    SessionRenameParams,
    SessionRenameResult,
    SessionSearchParams,
    SessionSearchResult,
    SessionUndoParams,
    SessionUndoResult,
    SkillsListResult,
    ToolsListResult,
    TurnCancelParams,
    TurnCancelResult,
    TurnStartParams,
    TurnStartResult,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
    WorktreeListResult,
    WorktreePruneResult,
)
from tether.protocol.version import PROTOCOL_VERSION, __version__

log = get_logger(__name__)

_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
"""An image's SHA-256 (it names a file: nothing else may reach the path)."""


class DaemonState(Protocol):
    """What the handlers need of the daemon."""

    @property
    def workspace(self) -> Path: ...
    @property
    def started_at(self) -> float: ...
    @property
    def idle_timeout(self) -> float: ...
    @property
    def sessions(self) -> Sessions: ...
    @property
    def connections(self) -> set[Connection]: ...
    @property
    def processes(self) -> ProcessTable: ...
    @property
    def lsp(self) -> LspPool: ...
    @property
    def trust(self) -> WorkspaceTrust: ...
    def request_shutdown(self, reason: str) -> None: ...


def handler_table(*entries: tuple[str, Handler]) -> dict[str, Handler]:
    """A dispatch table from `on(...)` entries; raises ValueError unless they name every method
    of `METHODS` exactly once."""
    names = [name for name, _ in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    missing = sorted(set(METHODS) - set(names))
    unknown = sorted(set(names) - set(METHODS))
    if repeated or missing or unknown:
        raise ValueError(
            f"handler table: repeated {repeated}, missing {missing}, not in METHODS {unknown}"
        )
    return dict(entries)


class Handlers:
    def __init__(self, daemon: DaemonState) -> None:
        self.daemon = daemon

    @property
    def sessions(self) -> Sessions:
        return self.daemon.sessions

    def table(self) -> dict[str, Handler]:
        """The daemon's dispatch table: one handler per method of the protocol."""
        return handler_table(
            on(INITIALIZE, self.initialize),
            on(DAEMON_STATUS, self.daemon_status),
            on(DAEMON_SHUTDOWN, self.daemon_shutdown),
            on(WORKSPACE_TRUST, self.workspace_trust),
            on(SESSION_CREATE, self.session_create),
            on(SESSION_LIST, self.session_list),
            on(SESSION_READ, self.session_read),
            on(SESSION_ATTACH, self.session_attach),
            on(SESSION_DETACH, self.session_detach),
            on(SESSION_DELETE, self.session_delete),
            on(SESSION_CONFIGURE, self.session_configure),
            on(TURN_START, self.turn_start),
            on(TURN_CANCEL, self.turn_cancel),
            on(TOOLS_LIST, self.tools_list),
            on(MODELS_LIST, self.models_list),
            on(SESSION_COMPACT, self.session_compact),
            on(LSP_STATUS, self.lsp_status),
            on(APPROVAL_RESPOND, self.approval_respond),
            on(APPROVAL_LIST, self.approval_list),
            on(SESSION_UNDO, self.session_undo),
            on(PROCESS_LIST, self.process_list),
            on(PROCESS_KILL, self.process_kill),
            on(PROCESS_OUTPUT, self.process_output),
            on(SKILLS_LIST, self.skills_list),
            on(HOOKS_LIST, self.hooks_list),
            on(MCP_STATUS, self.mcp_status),
            on(MCP_APPROVE, self.mcp_approve),
            on(SESSION_FORK, self.session_fork),
            on(SESSION_RENAME, self.session_rename),
            on(SESSION_SEARCH, self.session_search),
            on(SESSION_EVENTS, self.session_events),
            on(IMAGE_READ, self.image_read),
            on(FILE_READ, self.file_read),
            on(SESSION_DIFF, self.session_diff),
            on(SESSION_MERGE, self.session_merge),
            on(WORKTREE_LIST, self.worktree_list),
            on(WORKTREE_PRUNE, self.worktree_prune),
        )

    async def _controller_session(self, conn: Connection, session_id: str) -> Session:
        session = await self.sessions.get(session_id)
        if conn.role_in(session) == "observer":
            raise RpcError(
                ErrorCode.NOT_CONTROLLER,
                f"this connection observes session {session_id}; attach as controller to steer",
            )
        return session

    async def initialize(self, conn: Connection, p: InitializeParams) -> InitializeResult:
        if conn.initialized:
            raise RpcError(ErrorCode.ALREADY_INITIALIZED, "initialize was already sent")
        if p.protocol_version > PROTOCOL_VERSION:
            raise RpcError(
                ErrorCode.UNSUPPORTED_PROTOCOL,
                f"client speaks protocol {p.protocol_version}; this daemon speaks"
                f" {PROTOCOL_VERSION}: update tether",
            )
        conn.initialized = True
        conn.client_name = p.client_name
        conn.client_version = p.client_version
        conn.item_deltas = p.capabilities.item_deltas
        log.info(
            "client initialized",
            client=p.client_name,
            client_version=p.client_version,
            protocol=p.protocol_version,
        )
        if (env := p.provider_env) is not None:
            for key in (env.api_key, env.openai_api_key, env.anthropic_api_key):
                add_secret(key)
            conn.provider_env = {
                "TETHER_PROVIDER": env.provider,
                "TETHER_BASE_URL": env.base_url,
                "TETHER_MODEL": env.model,
                "TETHER_API_KEY": env.api_key,
                "OPENAI_API_KEY": env.openai_api_key,
                "ANTHROPIC_API_KEY": env.anthropic_api_key,
            }
        return InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            daemon_version=__version__,
            workspace=str(self.daemon.workspace),
            pid=os.getpid(),
            capabilities=DaemonCapabilities(
                methods=[name for name in METHODS if name in conn.handlers],
                notifications=list(NOTIFICATIONS),
                client_notifications=list(CLIENT_NOTIFICATIONS),
                limits=conn.limits(),
            ),
        )

    async def daemon_status(self, conn: Connection, params: Empty) -> DaemonStatusResult:
        d = self.daemon
        report = await self.sessions.models.report(conn.provider_env)
        provider = report.config.provider
        sandbox = command_sandbox(report.config, d.workspace)
        return DaemonStatusResult(
            pid=os.getpid(),
            workspace=str(d.workspace),
            daemon_version=__version__,
            protocol_version=PROTOCOL_VERSION,
            started_at=d.started_at,
            clients=len(d.connections),
            sessions_loaded=self.sessions.loaded_count,
            running_turns=self.sessions.running_count,
            idle_timeout=d.idle_timeout,
            provider=provider.kind,
            model=provider.model,
            model_from=report.sources.get("model", ""),
            base_url=provider.base_url,
            base_url_from=report.sources.get("base_url", ""),
            config_file=report.config_file,
            config_error=report.error,
            restart_needed=report.restart_needed,
            log_file=str(paths.log_path(str(d.workspace))),
            uptime_seconds=round(max(0.0, time.time() - d.started_at), 1),
            session_models=self.sessions.chosen_models(),
            sandbox=report.config.sandbox,
            sandbox_network=report.config.sandbox_network,
            sandbox_problem=await trio.to_thread.run_sync(sandbox_problem, sandbox)
            if sandbox is not None
            else "",
            workspace_trusted=d.trust.trusted,
            last_turn_environment=self.sessions.last_turn_environment,
        )

    async def daemon_shutdown(self, conn: Connection, params: Empty) -> Empty:
        self.daemon.request_shutdown("requested by a client")
        return Empty()

    async def workspace_trust(
        self, conn: Connection, p: WorkspaceTrustParams
    ) -> WorkspaceTrustResult:
        trust = self.daemon.trust
        # Set even when unchanged: a revoke also withdraws the skills' own yes, which an
        # untrusted workspace may still hold.
        if p.trusted is not None:
            by = conn.client_name or f"client {conn.id}"
            try:
                await trio.to_thread.run_sync(trust.write, p.trusted, by)
            finally:
                trust.changed()
            log.info("workspace trust changed", trusted=p.trusted, by=by)
        record = trust.record
        return WorkspaceTrustResult(
            workspace=str(self.daemon.workspace), trusted=record.trusted, by=record.by, at=record.at
        )

    async def session_create(self, conn: Connection, p: SessionCreateParams) -> SessionCreateResult:
        session = await self.sessions.create(
            p.title, p.permission_mode, p.model, isolation=p.isolation, base_ref=p.base_ref
        )
        return SessionCreateResult(session=session.info())

    async def session_list(self, conn: Connection, params: Empty) -> SessionListResult:
        return SessionListResult(sessions=await self.sessions.list())

    async def session_read(self, conn: Connection, p: SessionRef) -> SessionReadResult:
        session = await self.sessions.get(p.session_id)
        return SessionReadResult(snapshot=session.snapshot())

    async def session_attach(
        self, conn: Connection, p: SessionAttachParams
    ) -> Reply[SessionAttachResult]:
        session = await self.sessions.get(p.session_id)
        # No await from here to the return: the replay and the subscription are one step.
        session.detach(conn)
        result, replay = session.attach(
            conn,
            p.role,
            p.after,
            item_deltas=conn.item_deltas,
            replay_bytes=conn.outbox.replay_room(),
        )
        conn.sessions[session.id] = session
        return Reply(result, replay)

    async def session_detach(self, conn: Connection, p: SessionRef) -> Empty:
        session = conn.sessions.pop(p.session_id, None)
        if session is None or not session.detach(conn):
            raise RpcError(ErrorCode.NOT_ATTACHED, f"not attached to session {p.session_id}")
        return Empty()

    async def session_delete(self, conn: Connection, p: SessionDeleteParams) -> Empty:
        session = self.sessions.loaded(p.session_id)
        if session is not None and conn.role_in(session) == "observer":
            raise RpcError(
                ErrorCode.NOT_CONTROLLER,
                f"this connection observes session {p.session_id}; attach as controller to"
                " delete it",
            )
        await self.sessions.delete(
            p.session_id, by=conn.client_name or f"client {conn.id}", force=p.force
        )
        conn.sessions.pop(p.session_id, None)
        return Empty()

    async def turn_start(self, conn: Connection, p: TurnStartParams) -> TurnStartResult:
        if not p.text.strip():
            raise RpcError(
                ErrorCode.INVALID_PARAMS, "invalid params for turn/start: `text` is empty"
            )
        session = await self._controller_session(conn, p.session_id)
        if p.max_input_tokens is not None and p.max_input_tokens < 1:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                "invalid params for turn/start: `maxInputTokens` must be 1 or more",
            )
        provider = (await self.sessions.models.report(conn.provider_env)).config.provider
        refusal = input_refusal(
            p.text,
            window=provider.context_window,
            max_output=provider.max_output_tokens,
            allowed=p.max_input_tokens,
        )
        if refusal is not None:
            raise RpcError(ErrorCode.INVALID_PARAMS, refusal)
        turn_input = await self.sessions.turn_input(
            editor=p.editor,
            mentions=p.mentions,
            attachments=p.attachments,
            images=p.images,
            session=session,
            model=p.model,
            client_env=conn.provider_env,
        )
        # Looked up again after the await: an idle session may have been unloaded meanwhile.
        session = await self._controller_session(conn, p.session_id)
        return self.sessions.start_turn(
            session,
            TurnRequest(
                text=p.text,
                by=conn.client_name,
                permission_mode=p.permission_mode,
                model=p.model,
                turn_input=turn_input,
                client_env=conn.provider_env,
                # Dropped here, before the environment is kept anywhere or logged.
                shell_env=None if p.env is None else without_secrets(p.env),
            ),
        )

    async def session_configure(
        self, conn: Connection, p: SessionConfigureParams
    ) -> SessionConfigureResult:
        session = await self._controller_session(conn, p.session_id)
        if p.mcp_servers is not None:
            definitions = definitions_of(p.mcp_servers)
            if definitions and session.id not in conn.sessions:
                raise RpcError(
                    ErrorCode.NOT_ATTACHED,
                    f"attach to session {session.id} before giving it MCP servers: they are "
                    "this connection's while it stays attached",
                )
            servers = self.sessions.session_mcp
            if servers is None:
                if definitions:
                    raise RpcError(ErrorCode.INVALID_PARAMS, "this daemon runs no MCP servers")
            else:
                try:
                    # The connection's until it detaches or closes (not while it re-attaches
                    # after falling behind: it still holds the session then).
                    held = lambda: session.id in conn.sessions  # noqa: E731
                    await servers.give(session.id, definitions, held=held)
                except RuntimeError as exc:
                    raise RpcError(ErrorCode.SHUTTING_DOWN, str(exc)) from exc
        session.configure(
            permission_mode=p.permission_mode, model=p.model, subagent_model=p.subagent_model
        )
        return SessionConfigureResult(session=session.info())

    async def turn_cancel(self, conn: Connection, p: TurnCancelParams) -> TurnCancelResult:
        session = await self._controller_session(conn, p.session_id)
        return TurnCancelResult(turn_id=self.sessions.cancel_turn(session, p.turn_id))

    async def lsp_status(self, conn: Connection, params: Empty) -> LspStatusResult:
        return LspStatusResult(servers=self.daemon.lsp.status())

    async def session_compact(self, conn: Connection, p: SessionRef) -> SessionCompactResult:
        session = await self._controller_session(conn, p.session_id)
        return await self.sessions.compact(session, conn.provider_env)

    async def tools_list(self, conn: Connection, params: Empty) -> ToolsListResult:
        return ToolsListResult(tools=self.sessions.current_tools().infos())

    async def skills_list(self, conn: Connection, params: Empty) -> SkillsListResult:
        return await list_skills(self.sessions.skills)

    async def hooks_list(self, conn: Connection, params: Empty) -> HooksListResult:
        return await list_hooks(self.sessions.models, self.daemon.workspace, conn.provider_env)

    async def mcp_status(self, conn: Connection, params: Empty) -> McpStatusResult:
        pool = self.sessions.mcp
        if pool is None:
            return McpStatusResult()
        problems = await self._configure_mcp(conn, pool)
        return McpStatusResult(servers=pool.status(), problems=problems)

    async def mcp_approve(self, conn: Connection, params: McpApproveParams) -> McpApproveResult:
        pool = self.sessions.mcp
        if pool is not None:
            await self._configure_mcp(conn, pool)
            with contextlib.suppress(KeyError):
                by = conn.client_name or f"client {conn.id}"
                return McpApproveResult(server=await pool.approve(params.name, by))
        raise RpcError(
            ErrorCode.MCP_SERVER_NOT_FOUND, f"no MCP server {params.name!r} in this workspace"
        )

    async def _configure_mcp(self, conn: Connection, pool: McpPool) -> list[str]:
        """Give the pool the definitions as a turn starting now would read them."""
        try:
            config = await self.sessions.models.settings(conn.provider_env)
        except ConfigError as exc:
            return [f"your tether settings cannot be read: {exc}"]
        found = await trio.to_thread.run_sync(read_workspace_servers, self.sessions.workspace)
        definitions, problems = merge(config.mcp_servers, found)
        pool.configure(definitions)
        return problems

    async def models_list(self, conn: Connection, params: Empty) -> ModelsListResult:
        models = self.sessions.models
        try:
            config = await models.settings(conn.provider_env)
            async with models.lease(provider_named(config, "")) as model:
                ids = await model.list_models()
        except ConfigError as exc:
            raise RpcError(
                ErrorCode.MODEL_UNAVAILABLE,
                f"your tether settings are invalid: {exc}",
                ModelUnavailable(code="config_invalid"),
            ) from exc
        except ModelError as exc:
            raise RpcError(
                ErrorCode.MODEL_UNAVAILABLE, exc.message, ModelUnavailable(code=exc.code)
            ) from exc
        return ModelsListResult(
            models=[
                ModelInfo(id=i, images=takes_images(config.provider, config.models, i)) for i in ids
            ],
            current=model.model,
            provider=model.provider,
        )

    async def approval_respond(self, conn: Connection, p: ApprovalRespondParams) -> Empty:
        await self._controller_session(conn, p.session_id)
        broker = await self.sessions.broker(p.session_id)
        broker.respond(
            p.approval_id,
            decision=p.decision,
            scope=p.scope,
            by=conn.client_name or f"client {conn.id}",
            message=p.message,
        )
        return Empty()

    async def approval_list(self, conn: Connection, params: Empty) -> ApprovalListResult:
        return ApprovalListResult(
            approvals=[
                PendingApproval(
                    session_id=session.id,
                    approval=approval,
                    other_controllers=sum(
                        1
                        for subscriber, role in session.subscribers.items()
                        if role == "controller" and subscriber is not conn
                    ),
                )
                for session, approval in self.sessions.pending_approvals()
            ]
        )

    async def session_undo(self, conn: Connection, p: SessionUndoParams) -> SessionUndoResult:
        # Imported on first use: undo is rare, and a first turn does without it.
        from tether.daemon.sessions.undo import NothingToUndo, last_turn_with_changes, undo_turn

        session = await self._controller_session(conn, p.session_id)
        store = self.sessions.store
        turn_id = p.turn_id or await last_turn_with_changes(store, session.id)
        if turn_id is None:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, f"no turn of {session.id} changed files")
        # Looked up again after the await: an idle session may have been reloaded meanwhile.
        current = await self.sessions.get(session.id)
        if not any(turn.id == turn_id for turn in current.turns):
            no_turn = f"session {session.id} has no turn {turn_id!r}"
            raise RpcError(ErrorCode.TURN_NOT_FOUND, no_turn)
        if current.running_turn_id == turn_id:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, f"turn {turn_id} is still running")
        try:
            root = root_of(session, self.daemon.workspace)
            return await undo_turn(store, root, session.id, turn_id, p.force)
        except NothingToUndo as exc:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, str(exc)) from exc

    async def process_list(self, conn: Connection, params: Empty) -> ProcessListResult:
        return ProcessListResult(processes=self.daemon.processes.list())

    async def process_output(self, conn: Connection, p: ProcessOutputParams) -> ProcessOutputResult:
        try:
            managed = self.daemon.processes.get(p.process_id)
        except KeyError as exc:
            raise RpcError(
                ErrorCode.PROCESS_NOT_FOUND, f"no background process {p.process_id!r}"
            ) from exc
        text, truncated = managed.tail(p.max_chars)
        return ProcessOutputResult(process=managed.info(), text=text, truncated=truncated)

    async def process_kill(self, conn: Connection, p: ProcessKillParams) -> Empty:
        try:
            await self.daemon.processes.kill(p.process_id)
        except KeyError as exc:
            raise RpcError(
                ErrorCode.PROCESS_NOT_FOUND, f"no background process {p.process_id!r}"
            ) from exc
        return Empty()

    # --- sessions people manage: fork, rename, search, the event log ---------------------
    # Imported on first use: none of them is on a first turn's path.

    async def session_fork(self, conn: Connection, p: SessionForkParams) -> SessionForkResult:
        from tether.daemon.sessions.fork import FILES_NOT_COPIED, WORKTREE_FORKED, fork_session

        by = conn.client_name or f"client {conn.id}"
        fork = await fork_session(self.sessions, p.session_id, p.turn_id, title=p.title, by=by)
        note = FILES_NOT_COPIED if fork.worktree is None else WORKTREE_FORKED
        return SessionForkResult(session=fork.info(), note=note)

    async def session_rename(self, conn: Connection, p: SessionRenameParams) -> SessionRenameResult:
        from tether.daemon.sessions.titles import rename

        session = await self._controller_session(conn, p.session_id)
        rename(session, p.title, by=conn.client_name or f"client {conn.id}")
        return SessionRenameResult(session=session.info())

    async def session_search(self, conn: Connection, p: SessionSearchParams) -> SessionSearchResult:
        from tether.daemon.sessions.search import search

        return await search(self.sessions.store, p)

    async def session_events(self, conn: Connection, p: SessionEventsParams) -> SessionEventsResult:
        from tether.daemon.sessions.eventlog import read_events

        return await read_events(self.sessions, p)

    # --- worktree sessions: imported on first use, like the above ----------------------

    async def session_diff(self, conn: Connection, p: SessionRef) -> SessionDiffResult:
        from tether.daemon.sessions.worktrees import session_changes

        return await session_changes(await self.sessions.get(p.session_id))

    async def session_merge(self, conn: Connection, p: SessionMergeParams) -> SessionMergeResult:
        from tether.daemon.sessions.worktrees import merge_session

        session = await self.sessions.get(p.session_id)
        if conn.role_in(session) == "observer":
            raise RpcError(
                ErrorCode.NOT_CONTROLLER,
                f"this connection observes session {p.session_id}; attach as controller to"
                " merge it",
            )
        if session.running_turn_id is not None:
            raise RpcError(
                ErrorCode.SESSION_BUSY,
                f"session {session.id} has a running turn; merge once it has ended",
            )
        async with self.sessions.checkout_lock:
            return await merge_session(self.daemon.workspace, session, squash=p.squash)

    async def worktree_list(self, conn: Connection, params: Empty) -> WorktreeListResult:
        from tether.daemon.sessions.worktrees import worktree_entries

        found = await worktree_entries(self.daemon.workspace, await self.sessions.list())
        return WorktreeListResult(worktrees=found)

    async def worktree_prune(self, conn: Connection, params: Empty) -> WorktreePruneResult:
        return WorktreePruneResult(removed=await self.sessions.prune_worktrees())

    async def image_read(self, conn: Connection, p: ImageReadParams) -> ImageReadResult:
        if not _DIGEST.fullmatch(p.sha256):
            raise RpcError(
                ErrorCode.INVALID_PARAMS, f"`sha256` must be 64 hex digits, not {p.sha256[:80]!r}"
            )
        session = await self.sessions.get(p.session_id)
        found = await trio.to_thread.run_sync(
            self.sessions.images.load, session.id, [p.sha256.lower()]
        )
        data = found.get(p.sha256.lower())
        if data is None:
            raise RpcError(
                ErrorCode.INVALID_PARAMS, f"session {session.id} keeps no image {p.sha256}"
            )
        return ImageReadResult(data=data)

    async def file_read(self, conn: Connection, p: FileReadParams) -> FileReadResult:
        workspace = self.daemon.workspace
        if p.session_id is not None:
            workspace = root_of(await self.sessions.get(p.session_id), workspace)
        root = await trio.to_thread.run_sync(workspace.resolve)
        return await trio.to_thread.run_sync(read_window, root, p)
