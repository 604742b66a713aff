"""The daemon's JSON-RPC methods, one coroutine per entry of the protocol's method table."""

import os
from pathlib import Path
from typing import Protocol, cast

from tether.daemon.lsp.pool import LspPool
from tether.daemon.procs.table import ProcessTable
from tether.daemon.providers.base import ModelError
from tether.daemon.rpc.connection import Connection, Handler, Reply
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.undo import NothingToUndo, last_turn_with_changes, undo_turn
from tether.protocol.base import Wire
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import (
    METHODS,
    ApprovalRespondParams,
    DaemonStatusResult,
    Empty,
    InitializeParams,
    InitializeResult,
    LspServerStatus,
    LspStatusResult,
    ModelInfo,
    ModelsListResult,
    ProcessKillParams,
    ProcessListResult,
    SessionAttachParams,
    SessionCreateParams,
    SessionCreateResult,
    SessionListResult,
    SessionReadResult,
    SessionRef,
    SessionUndoParams,
    ToolsListResult,
    TurnCancelParams,
    TurnCancelResult,
    TurnStartParams,
)
from tether.protocol.version import PROTOCOL_VERSION, __version__


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
    def request_shutdown(self, reason: str) -> None: ...


class Handlers:
    def __init__(self, daemon: DaemonState) -> None:
        self.daemon = daemon
        self.sessions = daemon.sessions

    def table(self) -> dict[str, Handler]:
        table: dict[str, Handler] = {
            "initialize": self.initialize,
            "daemon/status": self.daemon_status,
            "daemon/shutdown": self.daemon_shutdown,
            "session/create": self.session_create,
            "session/list": self.session_list,
            "session/read": self.session_read,
            "session/attach": self.session_attach,
            "session/detach": self.session_detach,
            "session/delete": self.session_delete,
            "turn/start": self.turn_start,
            "turn/cancel": self.turn_cancel,
            "tools/list": self.tools_list,
            "models/list": self.models_list,
            "session/compact": self.session_compact,
            "lsp/status": self.lsp_status,
            "approval/respond": self.approval_respond,
            "session/undo": self.session_undo,
            "process/list": self.process_list,
            "process/kill": self.process_kill,
        }
        missing = set(METHODS) - set(table)
        assert not missing, f"methods without a handler: {missing}"
        return table

    async def _controller_session(self, conn: Connection, session_id: str) -> Session:
        session = await self.sessions.get(session_id)
        if conn.role_in(session) == "observer":
            raise RpcError(
                ErrorCode.NOT_CONTROLLER,
                f"this connection observes session {session_id}; attach as controller to steer",
            )
        return session

    async def initialize(self, conn: Connection, params: Wire) -> Wire:
        p = cast(InitializeParams, params)
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
        return InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            daemon_version=__version__,
            workspace=str(self.daemon.workspace),
            pid=os.getpid(),
        )

    async def daemon_status(self, conn: Connection, params: Wire) -> Wire:
        d = self.daemon
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
        )

    async def daemon_shutdown(self, conn: Connection, params: Wire) -> Wire:
        self.daemon.request_shutdown("requested by a client")
        return Empty()

    async def session_create(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionCreateParams, params)
        session = await self.sessions.create(p.title, p.permission_mode)
        return SessionCreateResult(session=session.info())

    async def session_list(self, conn: Connection, params: Wire) -> Wire:
        return SessionListResult(sessions=await self.sessions.list())

    async def session_read(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionRef, params)
        session = await self.sessions.get(p.session_id)
        return SessionReadResult(snapshot=session.snapshot())

    async def session_attach(self, conn: Connection, params: Wire) -> Wire | Reply:
        p = cast(SessionAttachParams, params)
        session = await self.sessions.get(p.session_id)
        # No await from here to the return: the replay and the subscription are one step.
        session.detach(conn)
        result, replay = session.attach(conn, p.role, p.after)
        conn.sessions[session.id] = session
        return Reply(result, replay)

    async def session_detach(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionRef, params)
        session = conn.sessions.pop(p.session_id, None)
        if session is None or not session.detach(conn):
            raise RpcError(ErrorCode.NOT_ATTACHED, f"not attached to session {p.session_id}")
        return Empty()

    async def session_delete(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionRef, params)
        session = self.sessions.loaded(p.session_id)
        if session is not None and conn.role_in(session) == "observer":
            raise RpcError(
                ErrorCode.NOT_CONTROLLER,
                f"this connection observes session {p.session_id}; attach as controller to"
                " delete it",
            )
        await self.sessions.delete(p.session_id, by=conn.client_name or f"client {conn.id}")
        conn.sessions.pop(p.session_id, None)
        return Empty()

    async def turn_start(self, conn: Connection, params: Wire) -> Wire:
        p = cast(TurnStartParams, params)
        if not p.text.strip():
            raise RpcError(
                ErrorCode.INVALID_PARAMS, "invalid params for turn/start: `text` is empty"
            )
        await self._controller_session(conn, p.session_id)
        turn_input = await self.sessions.turn_input(editor=p.editor, mentions=p.mentions)
        # Looked up again after the await: an idle session may have been unloaded meanwhile.
        session = await self._controller_session(conn, p.session_id)
        return self.sessions.start_turn(
            session,
            p.text,
            by=conn.client_name,
            permission_mode=p.permission_mode,
            turn_input=turn_input,
        )

    async def turn_cancel(self, conn: Connection, params: Wire) -> Wire:
        p = cast(TurnCancelParams, params)
        session = await self._controller_session(conn, p.session_id)
        return TurnCancelResult(turn_id=self.sessions.cancel_turn(session, p.turn_id))

    async def lsp_status(self, conn: Connection, params: Wire) -> Wire:
        return LspStatusResult(
            servers=[
                LspServerStatus(
                    name=s.name,
                    root=s.root,
                    state=s.state,
                    pid=s.pid,
                    restarts=s.restarts,
                    last_error=s.last_error,
                )
                for s in self.daemon.lsp.status()
            ]
        )

    async def session_compact(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionRef, params)
        session = await self._controller_session(conn, p.session_id)
        return await self.sessions.compact(session)

    async def tools_list(self, conn: Connection, params: Wire) -> Wire:
        return ToolsListResult(tools=self.sessions.tools.infos())

    async def models_list(self, conn: Connection, params: Wire) -> Wire:
        model = self.sessions.model
        try:
            ids = await model.list_models()
        except ModelError as exc:
            raise RpcError(ErrorCode.MODEL_UNAVAILABLE, exc.message) from exc
        return ModelsListResult(
            models=[ModelInfo(id=i) for i in ids], current=model.model, provider=model.provider
        )

    async def approval_respond(self, conn: Connection, params: Wire) -> Wire:
        p = cast(ApprovalRespondParams, params)
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

    async def session_undo(self, conn: Connection, params: Wire) -> Wire:
        p = cast(SessionUndoParams, params)
        session = await self._controller_session(conn, p.session_id)
        store = self.sessions.store
        turn_id = p.turn_id or await last_turn_with_changes(store, session.id)
        if turn_id is None:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, f"no turn of {session.id} changed files")
        # Looked up again after the await: an idle session may have been reloaded meanwhile.
        if (await self.sessions.get(session.id)).running_turn_id == turn_id:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, f"turn {turn_id} is still running")
        try:
            return await undo_turn(store, self.daemon.workspace, session.id, turn_id, p.force)
        except NothingToUndo as exc:
            raise RpcError(ErrorCode.NOTHING_TO_UNDO, str(exc)) from exc

    async def process_list(self, conn: Connection, params: Wire) -> Wire:
        return ProcessListResult(processes=self.daemon.processes.list())

    async def process_kill(self, conn: Connection, params: Wire) -> Wire:
        p = cast(ProcessKillParams, params)
        try:
            await self.daemon.processes.kill(p.process_id)
        except KeyError as exc:
            raise RpcError(
                ErrorCode.PROCESS_NOT_FOUND, f"no background process {p.process_id!r}"
            ) from exc
        return Empty()
