"""The workspace daemon: owns the store, the sessions and their turns, and the websocket server.

Task tree (every task has an owner):

    Daemon.run
    ├── Sessions.serve          turns, each in its own cancel scope
    ├── serve_websocket         one task per connection: reader, writer, keepalive
    ├── signals                 first SIGTERM/SIGINT: clean stop; second: exit at once
    └── idle watch              stop after `idle_timeout` with no client and no running turn

Stopping cancels the tree: turns end `interrupted` (persisted), connections close, the store
writes what is queued, the discovery file is removed and the lock released.
"""

import logging
import os
import secrets
import signal
import time
from functools import partial
from pathlib import Path

import trio
import trio_websocket

from tether.daemon import paths
from tether.daemon.config import Config, config_file
from tether.daemon.connection import Connection
from tether.daemon.handlers import Handlers
from tether.daemon.lifecycle import WorkspaceLock, remove_discovery, write_discovery
from tether.daemon.lsp.pool import LspPool
from tether.daemon.outbox import DEFAULT_LIMIT
from tether.daemon.procs import ProcessTable
from tether.daemon.providers.base import ModelClient
from tether.daemon.providers.factory import create_client
from tether.daemon.security import check_upgrade
from tether.daemon.sessions import Sessions
from tether.daemon.store import Store
from tether.daemon.tools.registry import ToolRegistry, default_tools
from tether.daemon.tools.run_command import PROCESSES_SERVICE
from tether.daemon.undo import TurnChanges
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.jsonrpc import notification_frame
from tether.protocol.methods import DaemonEventParams
from tether.protocol.version import PROTOCOL_VERSION, __version__

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest frame a client may send: big enough for a prompt with attached files, small enough
that one client cannot make the daemon buffer without bound."""


class Daemon:
    def __init__(
        self,
        workspace: Path,
        config: Config,
        *,
        idle_timeout: float | None = None,
        model: ModelClient | None = None,
        client_queue_limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.client_queue_limit = client_queue_limit
        self.workspace = workspace
        self.config = config
        self.idle_timeout = config.idle_timeout if idle_timeout is None else idle_timeout
        self.token = secrets.token_hex(32)
        self.started_at = time.time()
        self.port = 0
        self.store = Store(paths.database_path(str(workspace)))
        provider = config.provider
        self.model: ModelClient = model or create_client(provider, config_hint=str(config_file()))
        self.sessions = Sessions(
            store=self.store,
            workspace=workspace,
            model=self.model,
            tools=ToolRegistry(default_tools()),
            max_steps=config.max_steps,
            permissions=config.permissions,
            context_window=provider.context_window,
            max_output_tokens=provider.max_output_tokens,
        )
        self.connections: set[Connection] = set()
        self.sessions.on_turn_end = self._touch
        self.lsp = LspPool(
            workspace, config.lsp, on_event=self._lsp_event, log_dir=paths.log_dir() / "lsp"
        )
        self.sessions.lsp = self.lsp
        self.processes = ProcessTable(record=paths.process_record_path(str(workspace)))
        self.sessions.services[PROCESSES_SERVICE] = self.processes
        self.sessions.change_tracker = lambda session, turn_id: TurnChanges(
            self.store, workspace, session.id, turn_id
        )
        self._handlers = Handlers(self).table()
        self._shutdown = trio.Event()
        self._activity = trio.Event()
        self.discovery_path = paths.discovery_path(str(workspace))
        self.lock = WorkspaceLock(paths.lock_path(str(workspace)))

    def request_shutdown(self, reason: str) -> None:
        if not self._shutdown.is_set():
            log.info("shutting down: %s", reason)
            self.sessions.accepting = False
            self._shutdown.set()

    def _touch(self) -> None:
        self._activity.set()
        self._activity = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until shut down. The lock must already be held (`lock.acquire()`)."""
        self.store.open()
        try:
            async with trio.open_nursery() as nursery:
                # Signals first: from the moment the discovery file exists, SIGTERM must mean
                # a clean stop, not the default action.
                await nursery.start(self._watch_signals)
                await nursery.start(self.processes.serve)
                await nursery.start(self.lsp.serve)
                await nursery.start(self.sessions.serve)
                server: trio_websocket.WebSocketServer = await nursery.start(
                    partial(
                        trio_websocket.serve_websocket,
                        self._handle,
                        "127.0.0.1",
                        0,
                        None,
                        handler_nursery=nursery,
                        max_message_size=MAX_MESSAGE_BYTES,
                        receive_buffer_size=65536,
                        connect_timeout=10,
                        disconnect_timeout=5,
                    )
                )
                self.port = server.port
                write_discovery(
                    self.discovery_path,
                    DiscoveryInfo(
                        pid=os.getpid(),
                        port=self.port,
                        token=self.token,
                        protocol_version=PROTOCOL_VERSION,
                        daemon_version=__version__,
                        workspace=str(self.workspace),
                        started_at=self.started_at,
                    ),
                )
                log.info("serving %s on 127.0.0.1:%d", self.workspace, self.port)
                if self.idle_timeout > 0:
                    nursery.start_soon(self._watch_idle)
                task_status.started(self.port)
                await self._shutdown.wait()
                await self._stop(nursery)
        finally:
            remove_discovery(self.discovery_path, os.getpid())
            with trio.CancelScope(shield=True):
                await self.model.aclose()
                await trio.to_thread.run_sync(self.store.close)
            log.info("stopped")

    def broadcast(self, kind: str, message: str) -> None:
        """Tell every connected client something about the daemon itself."""
        frame = notification_frame("daemon/event", DaemonEventParams(kind=kind, message=message))
        for conn in self.connections:
            conn.send_nowait(frame)

    def _lsp_event(self, kind: str, detail: object) -> None:
        if kind == "diagnostics":
            return  # reported per turn, as session events
        message = getattr(detail, "message", "")
        log.info("lsp %s: %s", kind, message)
        if kind in ("server_crashed", "server_restarted"):
            self.broadcast(f"lsp/{kind.removeprefix('server_')}", message)

    async def _stop(self, nursery: trio.Nursery) -> None:
        # Turns first, so that their last events (turn_completed: interrupted) reach the
        # clients; then every connection flushes and closes; then everything else stops.
        await self.sessions.interrupt_all()
        await self.processes.shutdown()
        async with trio.open_nursery() as closers:
            for conn in list(self.connections):
                closers.start_soon(conn.close, "the daemon is shutting down")
        nursery.cancel_scope.cancel()

    async def _handle(self, request: trio_websocket.WebSocketRequest) -> None:
        # wsproto keeps the Host header apart from the others.
        host: str | None = getattr(getattr(request, "_event", None), "host", None)
        refusal = check_upgrade(host, request.headers, self.token)
        if refusal is not None:
            status, reason = refusal
            await request.reject(status, body=reason.encode())
            return
        ws = await request.accept()
        conn = Connection(ws, self._handlers, queue_limit=self.client_queue_limit)
        self.connections.add(conn)
        self._touch()
        try:
            await conn.serve()
        except Exception:
            # One broken connection must never take the daemon (and every turn) down.
            log.exception("connection %d failed", conn.id)
        finally:
            self.connections.discard(conn)
            self._touch()

    async def _watch_signals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                if self._shutdown.is_set():
                    log.warning("second signal: exiting at once")
                    os._exit(1)
                self.request_shutdown(f"signal {signal.Signals(signum).name}")

    def _idle(self) -> bool:
        return not self.connections and self.sessions.running_count == 0

    async def _watch_idle(self) -> None:
        while True:
            while not self._idle():
                await self._activity.wait()
            deadline = trio.current_time() + self.idle_timeout
            while self._idle() and trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    await self._activity.wait()
            if self._idle():
                self.request_shutdown(f"idle for {self.idle_timeout:g} s")
                return
