"""The workspace daemon: owns the store, the sessions and their turns, and the websocket server.

Task tree (every task has an owner):

    Daemon.run
    ├── signals                 first SIGTERM/SIGINT: clean stop; second: exit at once
    └── serving
        ├── Sessions.serve          turns, each in its own cancel scope
        ├── serve_websocket         one task per connection: reader, writer, keepalive, slow
        │                           requests (see tether.daemon.rpc.connection)
        ├── keep_discovery          puts the discovery file back if it goes missing
        └── idle watch              stop after `idle_timeout` with no client and no running turn

Signals are watched before anything else starts (the store's opening included) and until the
end of the cleanup. A stop requested while starting cancels the start; once serving, stopping
cancels the tree in order: turns end `interrupted` (persisted), connections close, the store
writes what is queued, the discovery file is removed and the lock released.

A database that cannot be used stops the start with `StoreOpenError`, and a fixed port that
cannot be listened on with `ListenRefused` (nothing is served, no discovery file). A queued
write that fails later is rolled back alone, logged, and told to every client as a
`store/write_failed` daemon event; the daemon goes on serving.
"""

import contextlib
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import trio
from wsproto.events import Request

from tether.daemon.config import paths
from tether.daemon.config.live import UserSettings
from tether.daemon.config.sandbox import command_sandbox
from tether.daemon.logs.log import add_secret, get_logger
from tether.daemon.lsp.pool import LspPool
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.pool import McpPool
from tether.daemon.procs.groups import KILL_GRACE
from tether.daemon.procs.sandbox import sandbox_problem
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.connection import Connection
from tether.daemon.rpc.handlers import Handlers
from tether.daemon.rpc.outbox import DEFAULT_MAX_BYTES
from tether.daemon.rpc.security import check_upgrade
from tether.daemon.rpc.websocket import WebSocket, serve_websocket
from tether.daemon.server.idle import IdleTimer
from tether.daemon.server.lifecycle import WorkspaceLock, keep_discovery, remove_discovery
from tether.daemon.server.limits import pending_handshake_limit
from tether.daemon.server.model_client import create_client
from tether.daemon.server.recent import remember
from tether.daemon.sessions.models import ModelPool
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.schema import StoreOpenError
from tether.daemon.sessions.store import Store
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.skills.trust import SkillsTrust
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.code_intel import LSP_SERVICE
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.run_command import PROCESSES_SERVICE
from tether.daemon.workspace_trust import TrustRecord, WorkspaceTrust
from tether.protocol.discovery import DISCOVERY_CHECK_INTERVAL, DiscoveryInfo
from tether.protocol.enums import DaemonEventKind
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import DaemonEventParams
from tether.protocol.version import PROTOCOL_VERSION, __version__

if TYPE_CHECKING:
    from tether.daemon.sessions.session import Session
    from tether.daemon.sessions.undo import TurnChanges

log = get_logger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest frame a client may send: big enough for a prompt with attached files, small enough
that one client cannot make the daemon buffer without bound."""


class Daemon:
    def __init__(
        self,
        workspace: Path,
        settings: UserSettings,
        *,
        lock: WorkspaceLock,
        idle_timeout: float | None = None,
        client_queue_bytes: int = DEFAULT_MAX_BYTES,
        kill_grace: float = KILL_GRACE,
        discovery_interval: float = DISCOVERY_CHECK_INTERVAL,
        port: int = 0,
        token: str | None = None,
    ) -> None:
        """`settings` are the user's, read again at every turn (see
        `tether.daemon.config.live`); what only a start reads comes from `settings.started`.
        `kill_grace`: seconds the processes of commands get between SIGTERM and SIGKILL when
        they are stopped (a cancelled turn, a timeout, the daemon stopping).
        `discovery_interval`: how often a missing or replaced discovery file is put back (at
        most `DISCOVERY_CHECK_INTERVAL`, which clients count on).
        `port`: the loopback port to listen on (0: any free one, the default; a fixed one serves
        a forwarded port, as in a container). `token`: the clients' token (default: a new
        random one each start; a fixed one comes from a secret the orchestrator holds)."""
        self.discovery_interval = min(discovery_interval, DISCOVERY_CHECK_INTERVAL)
        self.client_queue_bytes = client_queue_bytes
        self.workspace = workspace
        config = self.config = settings.started
        self.idle_timeout = config.idle_timeout if idle_timeout is None else idle_timeout
        self.token = token or secrets.token_hex(32)
        add_secret(self.token)
        self.listen_port = port
        self.started_at = time.time()
        self.port = 0
        self.store = Store(paths.database_path(str(workspace)))
        hint = str(settings.path)
        self.models = ModelPool(
            settings, lambda provider: create_client(provider, config_hint=hint)
        )
        self.connections: set[Connection] = set()
        self.idle = IdleTimer(self.idle_timeout, self._idle)
        trust = TrustRecord(paths.workspace_trust_path(str(workspace)))
        self.lsp = LspPool(
            workspace,
            config.lsp,
            trusted=lambda: trust.trusted,
            on_event=self._lsp_event,
            log_dir=paths.log_dir() / "lsp",
            diagnostics_wait=config.diagnostics_wait,
            first_wait=config.diagnostics_first_wait,
        )
        self.processes = ProcessTable(
            grace=kill_grace, record=paths.process_record_path(str(workspace))
        )
        self.mcp = McpPool(
            workspace,
            approvals=ServerApprovals(paths.mcp_approvals_path(str(workspace))),
            owned=self.processes.owned,
            on_event=self.broadcast,
            log_dir=paths.log_dir() / "mcp",
        )
        skills_trust = SkillsTrust(paths.skills_trust_path(str(workspace)), trust)
        self.trust = WorkspaceTrust(
            trust, also_revoke=[skills_trust.revoke], on_change=[self.lsp.trust_changed]
        )
        self.sessions = Sessions(
            store=self.store,
            workspace=workspace,
            models=self.models,
            tools=ToolRegistry(default_tools(kill_grace=kill_grace)),
            permissions=config.permissions,
            context_window=config.provider.context_window,
            max_output_tokens=config.provider.max_output_tokens,
            services={PROCESSES_SERVICE: self.processes, LSP_SERVICE: self.lsp},
            change_tracker=self._change_tracker,
            lsp=self.lsp,
            on_turn_end=self._touch,
            skills=SkillLibrary(workspace, paths.user_skills_dir(), skills_trust),
            mcp=self.mcp,
        )
        self._handlers = Handlers(self).table()
        self._shutdown = trio.Event()
        # Entered by `_serve`; cancelled by a stop requested before it is serving.
        self._starting = trio.CancelScope()
        self._serving = False
        self._store_open = False
        self.discovery_path = paths.discovery_path(str(workspace))
        self.lock = lock

    def _change_tracker(self, session: "Session", turn_id: str) -> "TurnChanges":
        """What records the files a turn changes, for undo and the turn's summary (imported
        on a turn's first change: a turn that changes nothing does without it)."""
        from tether.daemon.sessions.session import root_of
        from tether.daemon.sessions.undo import TurnChanges

        return TurnChanges(self.store, root_of(session, self.workspace), session.id, turn_id)

    def request_shutdown(self, reason: str) -> None:
        if not self._shutdown.is_set():
            log.info("shutting down", reason=reason)
            self.sessions.stop_accepting()
            self.lock.record("stopping")
            self._shutdown.set()
            if not self._serving:
                self._starting.cancel()

    def _touch(self) -> None:
        self.idle.touch()

    def _discovery_moved(self, path: Path) -> None:
        self.discovery_path = path
        self.lock.moved(path)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until shut down. The lock must already be held (`lock.acquire()`). A first
        SIGTERM/SIGINT at any moment, even while the store opens, stops it cleanly. Raises
        `StoreOpenError` when the database cannot be used, `ListenRefused` when the fixed port
        cannot be listened on."""
        token = trio.lowlevel.current_trio_token()

        def write_failed(what: str, exc: BaseException) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self.broadcast, "store/write_failed", f"{what}: {exc}")

        self.store.on_write_error = write_failed
        try:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with trio.open_nursery() as guard:
                    guard.start_soon(self._watch_signals, signals)
                    try:
                        await self._serve(task_status)
                    finally:
                        remove_discovery(self.discovery_path, os.getpid())
                        with trio.CancelScope(shield=True):
                            await self.models.aclose()
                            if self._store_open:
                                await trio.to_thread.run_sync(self.store.close)
                        log.info("daemon stopped", pid=os.getpid())
                    guard.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            refused = _lone(group, StoreOpenError) or _lone(group, ListenRefused)
            if refused is None:
                raise
            raise refused from None

    async def _serve(self, task_status: trio.TaskStatus[int]) -> None:
        with self._starting:
            log.info("opening the store", path=self.store.path)
            # In a thread, abandoned on cancel: a stop must not wait for a slow or stuck open
            # (a locked or damaged database).
            await trio.to_thread.run_sync(self.store.open, abandon_on_cancel=True)
            self._store_open = True
            async with trio.open_nursery() as nursery:
                await nursery.start(self.processes.serve)
                await nursery.start(self.lsp.serve)
                await nursery.start(self.mcp.serve)
                await nursery.start(self.sessions.serve)
                self.port = await self._listen(nursery)
                info = DiscoveryInfo(
                    pid=os.getpid(),
                    port=self.port,
                    token=self.token,
                    protocol_version=PROTOCOL_VERSION,
                    daemon_version=__version__,
                    workspace=str(self.workspace),
                    started_at=self.started_at,
                )
                await nursery.start(
                    partial(
                        keep_discovery,
                        partial(paths.discovery_path, str(self.workspace)),
                        info,
                        moved=self._discovery_moved,
                        interval=self.discovery_interval,
                    )
                )
                self._serving = True
                self.lock.record("serving")
                log.info(
                    "daemon started",
                    pid=os.getpid(),
                    port=self.port,
                    version=__version__,
                    workspace=self.workspace,
                )
                # In a thread: a slow disk must not hold up the first clients.
                nursery.start_soon(trio.to_thread.run_sync, partial(remember, self.workspace))
                if self.idle_timeout > 0:
                    nursery.start_soon(self._watch_idle)
                nursery.start_soon(self._check_sandbox)
                task_status.started(self.port)
                await self._shutdown.wait()
                await self._stop(nursery)

    async def _listen(self, nursery: trio.Nursery) -> int:
        serve = partial(
            serve_websocket,
            self._handle,
            "127.0.0.1",
            self.listen_port,
            check=self._check_upgrade,
            max_message_size=MAX_MESSAGE_BYTES,
            max_pending=pending_handshake_limit(),
        )
        try:
            return await nursery.start(serve)
        except OSError as exc:
            raise ListenRefused(
                f"cannot listen on 127.0.0.1:{self.listen_port}: {exc.strerror or exc}"
            ) from exc

    async def _check_sandbox(self) -> None:
        """Try the command sandbox once, at the start, when the settings turn it on: a missing
        or failing bubblewrap is in the log from the first minute (a turn's notice and
        `daemon/status` say it too)."""
        sandbox = command_sandbox(self.config, self.workspace)
        if sandbox is None:
            return
        found = await trio.to_thread.run_sync(sandbox_problem, sandbox)
        if found:
            log.warning("sandboxed commands cannot run", problem=found)
        else:
            log.info("commands run in the sandbox (bubblewrap)")

    def broadcast(self, kind: DaemonEventKind, message: str) -> None:
        """Tell every connected client something about the daemon itself: one frame, encoded
        once, queued as a must-deliver frame for each (see `tether.daemon.rpc.outbox`)."""
        frame = notification_frame("daemon/event", DaemonEventParams(kind=kind, message=message))
        for conn in self.connections:
            conn.send_nowait(frame)

    def _lsp_event(self, kind: str, detail: object) -> None:
        if kind == "diagnostics":
            return  # reported per turn, as session events
        message = getattr(detail, "message", "")
        if kind == "server_crashed":
            self.broadcast("lsp/crashed", message)
        elif kind == "server_restarted":
            self.broadcast("lsp/restarted", message)

    async def _stop(self, nursery: trio.Nursery) -> None:
        # Turns first, so that their last events (turn_completed: interrupted) reach the
        # clients; then every connection flushes and closes; then everything else stops.
        await self.sessions.interrupt_all()
        await self.processes.shutdown()
        async with trio.open_nursery() as closers:
            for conn in list(self.connections):
                closers.start_soon(conn.close, "the daemon is shutting down")
        nursery.cancel_scope.cancel()

    def _check_upgrade(self, request: Request) -> tuple[int, str] | None:
        return check_upgrade(request.host, request.extra_headers, self.token)

    async def _handle(self, ws: WebSocket) -> None:
        conn = Connection(
            ws,
            self._handlers,
            queue_bytes=self.client_queue_bytes,
        )
        self.connections.add(conn)
        self._touch()
        try:
            # A connection's own failure is logged by the server; it never stops the daemon.
            await conn.serve()
        finally:
            self.connections.discard(conn)
            self._touch()

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            if self._shutdown.is_set():
                log.warning("second signal: exiting at once")
                os._exit(1)
            self.request_shutdown(f"signal {signal.Signals(signum).name}")

    def _idle(self) -> bool:
        return not self.connections and self.sessions.running_count == 0

    async def _watch_idle(self) -> None:
        await self.idle.wait_idle()
        self.request_shutdown(f"idle for {self.idle_timeout:g} s")


_E = TypeVar("_E", bound=BaseException)


class ListenRefused(Exception):
    """The fixed port asked for cannot be listened on (taken, or not allowed)."""


def _lone(group: BaseExceptionGroup[BaseException], kind: type[_E]) -> _E | None:
    """The one exception of `kind` that `group` holds, when it holds nothing else (a refusal
    to start reaches `main` as itself, not wrapped by the nurseries it passed through)."""
    matched, rest = group.split(kind)
    if matched is None or rest is not None:
        return None
    leaves: list[BaseException] = []
    stack: list[BaseException] = [matched]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(cast("tuple[BaseException, ...]", exc.exceptions))
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], kind) else None
