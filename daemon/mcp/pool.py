"""The MCP servers of the workspace: started lazily, kept running across turns, restarted
after a crash.

Server states (`McpServerInfo.state` in the protocol):

    needs_approval   a workspace server the user has not approved as defined now, or whose
                     named files (`named_files`: its `server.js`) changed since: never run;
                     `approval_reason` says which
    idle ─► starting ─► running ─► (exited, closed stdout, connection or session lost) ─► crashed
               │                                                            │ backoff
               └─ (failed to start: no such program, no revision settled) ──┤
                                                                            ▼
                                                     restarting ─► running | crashed
    crashed five times in a row without a healthy run (60 s): failed; tried again by the
    next turn once `max_backoff` has passed since.

Rules:
- Lazy: nothing starts with the daemon. The first turn that would offer tools
  (`ensure_started`, before its first model call) starts every approved server at once and
  waits, each for at most its `startup_timeout`, for its revision and its tool list; a
  server not ready by then is left out of that turn (its start goes on) and reported.
  The revision a server spoke is remembered for its restarts (`McpClient.connect`'s hint),
  so only its first start pays for finding it out.
- Before each turn, a running server whose tools are stale (it said they changed, or the
  freshness its 2026-07-28 list gave has passed) lists them again.
- Each server runs in the pool's own nursery (`serve`, a task in the daemon's tree), not a
  turn's; a stdio server's process tree is the daemon's like any command's
  (`tether.daemon.procs.server`: death signal, durable ownership record, group stopped).
- A crash is reported at once (`on_event("mcp/crashed", message)`) and the server restarts
  (over HTTP: reconnects, a new session) after a backoff: `backoff`, then twice that, … up
  to `max_backoff`; an HTTP server that only forgot the session (it answers, rejecting the
  session id) is reconnected at once. Back, it is reported: `mcp/restarted` for a stdio
  server, `mcp/recovered` for an HTTP one.
- A call waits for nothing but its own answer: a server not running fails the call at once
  with its state and last error; a call has the server's `timeout` and is cancelled at the
  server when it passes or the turn is cancelled. A call that never reached the server (no
  connection, a rejected session: McpNotDelivered) waits for the reconnection that follows
  and is sent once more on the new connection; a call cut mid-answer is not sent again (the
  server may have acted on it): it fails, and the server is marked crashed.
- `configure` takes the definitions a turn read: a server whose definition or named files
  changed is stopped and replaced, a removed one stopped.
- A workspace server's named files are hashed again right before each start and restart: a
  file changed since the approval leaves the server in `needs_approval`, never run.
"""

import math
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

from tether.daemon.logs.log import add_secret, bind, get_logger
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.client import PROBE_TIMEOUT, McpClient, McpTool, OnProgress, Transport
from tether.daemon.mcp.config import ServerDefinition
from tether.daemon.mcp.errors import McpError, McpNotDelivered, McpSessionLost, McpUnavailable
from tether.daemon.mcp.http import HttpTransport
from tether.daemon.mcp.named_files import named_files
from tether.daemon.mcp.stdio import StdioTransport
from tether.daemon.nursery import LentNursery
from tether.daemon.procs.env import command_env, is_secret_variable
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.procs.server import open_server, stop_server
from tether.protocol.enums import McpEventKind, McpServerState
from tether.protocol.methods import McpServerInfo, McpToolLeftOut, McpToolSummary

log = get_logger(__name__)

BACKOFF = 1.0
MAX_BACKOFF = 30.0
HEALTHY_RUN = 60.0
MAX_FAILURES = 5
STOP_GRACE = 1.0

OnEvent = Callable[[McpEventKind, str], None]


class _Server:
    def __init__(self, definition: ServerDefinition, state: McpServerState) -> None:
        self.definition = definition
        self.name = definition.name
        self.config = definition.config
        self.fingerprint = definition.config.fingerprint()
        self.state: McpServerState = state
        self.approval_reason = ""
        self.tools: list[McpTool] = []
        self.left_out: dict[str, str] = {}
        self.last_error = ""
        self.restarts = 0
        self.failures = 0
        self.failed_at = -math.inf
        self.pid: int | None = None
        self.revision = ""
        """The MCP revision of its last connection: the next one starts from it."""
        self.client: McpClient | None = None
        self.scope = trio.CancelScope()
        self.ready = trio.Event()
        self.attempts = 0
        """How many starts (restarts, reconnections) have concluded, running or not."""
        self._changed = trio.Event()

    def changed(self) -> None:
        """An attempt concluded, or the supervisor stopped: wake `wait_changed`."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def info(self) -> McpServerInfo:
        return McpServerInfo(
            name=self.name,
            source=self.definition.source,
            origin=self.definition.origin,
            transport=self.config.transport,
            state=self.state,
            tools=[
                McpToolSummary(
                    name=tool.name,
                    description=tool.description,
                    read_only=tool.annotations is not None and tool.annotations.readOnlyHint,
                )
                for tool in self.tools
            ],
            left_out=[McpToolLeftOut(name=n, reason=r) for n, r in self.left_out.items()],
            last_error=self.last_error,
            pid=self.pid,
            restarts=self.restarts,
            revision=self.revision,
            command=[self.config.command, *self.config.args] if self.config.command else [],
            url=self.config.url,
            approval_reason=self.approval_reason if self.state == "needs_approval" else "",
        )


class McpPool:
    def __init__(
        self,
        workspace: Path,
        *,
        approvals: ServerApprovals | None = None,
        owned: OwnedGroups | None = None,
        on_event: OnEvent | None = None,
        log_dir: Path | None = None,
        backoff: float = BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        grace: float = STOP_GRACE,
        probe_timeout: float = PROBE_TIMEOUT,
    ) -> None:
        """`owned`: where stdio servers' groups are recorded (the process table's record).
        `log_dir`: where each stdio server's stderr goes (`NAME.log`; None: nowhere).
        `probe_timeout`: how long an unanswered `server/discover` waits (`McpClient`)."""
        self.workspace = workspace
        self.approvals = approvals if approvals is not None else ServerApprovals(None)
        self.owned = owned
        self.on_event: OnEvent = on_event or (lambda _kind, _message: None)
        self.log_dir = log_dir
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.grace = grace
        self.probe_timeout = probe_timeout
        self._servers: dict[str, _Server] = {}
        self._lent = LentNursery()
        self._serving = False
        # Made for the first server over HTTP, not at the start (see `_http_client`).
        self._http: httpx.AsyncClient | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; then every server is stopped before this returns."""
        self._serving = True
        try:
            async with trio.open_nursery() as nursery:
                await self._lent.lend(nursery, task_status)
        finally:
            self._serving = False
            http, self._http = self._http, None
            if http is not None:
                with trio.CancelScope(shield=True):
                    await http.aclose()

    def _http_client(self) -> httpx.AsyncClient:
        """The connection pool of the HTTP servers, made for the first one: its TLS context
        loads the CA bundle, tens of milliseconds that a daemon with no HTTP server (and every
        daemon's start) does without."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        return self._http

    # --- what the turns use ------------------------------------------------------------

    def configure(self, definitions: list[ServerDefinition]) -> None:
        """Use these definitions from now on (see the module rules)."""
        wanted = {d.name: d for d in definitions}
        for name, server in list(self._servers.items()):
            definition = wanted.get(name)
            if (
                definition is None
                or definition.source != server.definition.source
                or definition.config.fingerprint() != server.fingerprint
                or definition.files != server.definition.files
            ):
                server.scope.cancel()
                del self._servers[name]
        for name, definition in wanted.items():
            server = self._servers.get(name)
            reason = self._needs_approval(definition, definition.files)
            if server is None:
                server = self._servers[name] = _Server(
                    definition, "needs_approval" if reason else "idle"
                )
                server.approval_reason = reason
            elif server.state == "needs_approval":
                server.approval_reason = reason
                if not reason:
                    server.state = "idle"

    def _needs_approval(self, definition: ServerDefinition, files: dict[str, str]) -> str:
        """Why the server needs the user's approval before it runs ("" when it does not)."""
        if definition.source == "user":
            return ""
        return self.approvals.needs_approval(
            definition.name, definition.config.fingerprint(), files
        )

    async def _still_approved(self, server: _Server) -> bool:
        """Whether a workspace server's named files are still the ones approved, read again
        now, right before it is run; when not, it goes back to `needs_approval`."""
        if server.definition.source == "user":
            return True
        config = server.config
        files = await trio.to_thread.run_sync(
            named_files, self.workspace, config.command, config.args, config.cwd, config.env
        )
        reason = self._needs_approval(server.definition, files)
        if not reason:
            return True
        server.state = "needs_approval"
        server.approval_reason = reason
        server.ready.set()
        log.warning("an MCP server's code changed since its approval", server=server.name)
        return False

    def awaiting_approval(self) -> list[tuple[ServerDefinition, str]]:
        """The servers that need the user's approval, with why."""
        return [
            (s.definition, s.approval_reason)
            for s in self._servers.values()
            if s.state == "needs_approval"
        ]

    async def approve(self, name: str, by: str = "") -> McpServerInfo:
        """Approve the workspace server `name` as defined now (KeyError: no such server); it
        starts with the next turn. Writes the approvals file in a thread (an OSError
        propagates; the server stays approved for this daemon's life)."""
        server = self._servers[name]
        if server.definition.source == "workspace":
            try:
                await trio.to_thread.run_sync(
                    self.approvals.grant, name, server.fingerprint, by, server.definition.files
                )
            finally:
                if server.state == "needs_approval":
                    server.state = "idle"
                    server.approval_reason = ""
        return server.info()

    async def ensure_started(self) -> list[str]:
        """Start every approved server not running yet and wait (each at most its startup
        timeout) until it is running or has failed; list again the tools of servers that
        said they changed. Returns the problems to report (servers left out and why).
        Cancellation stops the waiting; the starts go on in the pool's nursery."""
        nursery = self._lent.nursery
        if nursery is None:
            return []
        waiting: list[_Server] = []
        now = trio.current_time()
        for server in self._servers.values():
            retry = server.state == "failed" and now - server.failed_at >= self.max_backoff
            if server.state == "idle" or retry:
                server.state = "starting"
                server.failures = 0
                server.ready = trio.Event()
                server.scope = trio.CancelScope()  # a failed server's supervisor used its own
                nursery.start_soon(self._supervise, server)
                waiting.append(server)
            elif server.state in ("starting", "restarting"):
                waiting.append(server)
        async with trio.open_nursery() as waits:
            for server in waiting:
                waits.start_soon(self._wait_ready, server)
            for server in self._servers.values():
                if server.state == "running" and server.client and server.client.tools_stale():
                    waits.start_soon(self._relist, server)
        return [
            f"MCP server {s.name} is {s.state}" + (f": {s.last_error}" if s.last_error else "")
            for s in waiting
            if s.state not in ("running", "needs_approval")
        ]

    @staticmethod
    async def _wait_ready(server: _Server) -> None:
        with trio.move_on_after(server.config.startup_timeout + 1.0):
            await server.ready.wait()

    async def _relist(self, server: _Server) -> None:
        client = server.client
        if client is None:
            return
        try:
            server.tools = await client.list_tools(seconds=server.config.startup_timeout)
            server.left_out = client.left_out
        except McpError as exc:
            server.last_error = f"listing its tools again failed: {exc}"

    def offered(self) -> list[tuple[ServerDefinition, McpTool]]:
        """The tools of the running servers, server by server in definition order."""
        return [
            (server.definition, tool)
            for server in self._servers.values()
            if server.state == "running"
            for tool in server.tools
        ]

    async def call(
        self,
        name: str,
        tool: str,
        arguments: dict[str, object],
        on_progress: OnProgress | None = None,
    ) -> dict[str, object]:
        """Call `tool` of server `name`, handing the server's progress reports to
        `on_progress`. Raises McpError (see the module rules)."""
        server = self._servers.get(name)
        if server is None:
            raise McpUnavailable(f"there is no MCP server {name} any more")
        client = server.client
        if client is None or server.state != "running":
            raise McpUnavailable(_unavailable(server))
        seen = server.attempts
        try:
            return await client.call_tool(
                tool, arguments, seconds=server.config.timeout, on_progress=on_progress
            )
        except McpNotDelivered as exc:
            log.info("an MCP call did not reach its server; reconnecting", server=name, error=exc)
            client = await self._reconnected(server, seen)
            if client is None:
                raise McpUnavailable(f"{exc}; reconnecting failed: {_unavailable(server)}") from exc
        return await client.call_tool(
            tool, arguments, seconds=server.config.timeout, on_progress=on_progress
        )

    async def _reconnected(self, server: _Server, seen: int) -> McpClient | None:
        """The client of the connection that follows attempt `seen`, once it runs; None when
        that attempt failed, the supervisor stopped, or it took longer than a start may."""
        with trio.move_on_after(self.backoff + server.config.startup_timeout + 1.0):
            while (
                server.attempts == seen
                and server.state not in ("failed", "needs_approval")
                and self._servers.get(server.name) is server
            ):
                await server.wait_changed()
        if server.state == "running" and server.client is not None:
            return server.client
        return None

    def status(self) -> list[McpServerInfo]:
        return [server.info() for server in self._servers.values()]

    # --- one server's life ---------------------------------------------------------------

    async def _supervise(self, server: _Server) -> None:
        # A server outlives the turn that started it.
        bind(conn=None, session=None, turn=None)
        try:
            with server.scope:
                await self._keep_up(server)
        finally:
            server.changed()

    async def _keep_up(self, server: _Server) -> None:
        remote = server.config.transport == "http"
        while True:
            if not await self._still_approved(server):
                return
            began = trio.current_time()
            error, at_once = await self._run_once(server)
            server.client = None
            server.tools = []
            server.left_out = {}
            crashed = server.state == "running"
            server.last_error = error
            if not crashed:
                server.attempts += 1
                server.changed()
            if trio.current_time() - began >= HEALTHY_RUN:
                server.failures = 0
            server.failures += 1
            server.ready.set()
            if remote:
                what = "lost its connection" if crashed else "could not be connected to"
            else:
                what = "crashed" if crashed else "failed to start"
            if server.failures >= MAX_FAILURES:
                server.state = "failed"
                server.failed_at = trio.current_time()
                message = f"MCP server {server.name} {what}: {error}; giving up for now"
                log.warning("an MCP server gave up", server=server.name, error=error)
                self.on_event("mcp/failed", message)
                return
            # The server is up and only forgot the session: a new one is opened at once.
            delay = (
                0.0
                if at_once and server.failures == 1
                else min(self.backoff * 2 ** (server.failures - 1), self.max_backoff)
            )
            server.state = "crashed"
            again = "reconnecting" if remote else "restarting"
            message = f"MCP server {server.name} {what}: {error}; {again} in {delay:g} s"
            log.warning(
                "an MCP server stopped", server=server.name, what=what, error=error, delay=delay
            )
            self.on_event("mcp/crashed", message)
            await trio.sleep(delay)
            server.state = "restarting"
            server.restarts += 1
            server.ready = trio.Event()

    async def _run_once(self, server: _Server) -> tuple[str, bool]:
        """One connection, from start to end; returns why it ended, and whether it was a
        session the server forgot (then a new one may be opened at once)."""
        ended = "the server closed the connection"
        forgot = False
        try:
            async with self._connect(server) as transport:
                client = McpClient(transport, name=server.name, probe_timeout=self.probe_timeout)
                async with trio.open_nursery() as nursery:

                    async def run_client() -> None:
                        nonlocal ended, forgot
                        try:
                            await client.run()
                        except McpError as exc:
                            ended = str(exc)
                            forgot = isinstance(exc, McpSessionLost)
                        finally:
                            nursery.cancel_scope.cancel()

                    nursery.start_soon(run_client)
                    timeout = server.config.startup_timeout
                    try:
                        with trio.fail_after(timeout):
                            await client.connect(seconds=timeout, hint=server.revision)
                            server.revision = client.revision
                            tools = await client.list_tools(seconds=timeout)
                    except trio.TooSlowError:
                        nursery.cancel_scope.cancel()
                        return f"not ready (revision, tool list) within {timeout:g} s", False
                    except McpError as exc:
                        nursery.cancel_scope.cancel()
                        return str(exc), False
                    server.client = client
                    server.tools = tools
                    server.left_out = client.left_out
                    server.state = "running"
                    nursery.start_soon(client.listen)
                    server.last_error = ""
                    server.ready.set()
                    server.attempts += 1
                    server.changed()
                    log.info(
                        "MCP server started",
                        server=server.name,
                        pid=server.pid,
                        tools=len(tools),
                        restarts=server.restarts,
                    )
                    if server.restarts and server.config.transport == "http":
                        self.on_event(
                            "mcp/recovered",
                            f"MCP server {server.name} is reachable again (a new session)",
                        )
                    elif server.restarts:
                        self.on_event("mcp/restarted", f"MCP server {server.name} is back")
        except OSError as exc:
            return f"cannot start {server.config.command!r}: {exc.strerror or exc}", False
        except McpError as exc:
            return str(exc), False
        return ended, forgot

    @asynccontextmanager
    async def _connect(self, server: _Server) -> AsyncGenerator[Transport]:
        config = server.config
        # Never logged, but masked should a server's error quote one.
        for name, value in config.env.items():
            if is_secret_variable(name, value):
                add_secret(value)
        for value in config.headers.values():
            add_secret(value.removeprefix("Bearer "))
        if config.command:
            cwd = self.workspace / config.cwd if config.cwd else self.workspace
            env = {**command_env(), **config.env}
            log_path = self.log_dir / f"{server.name}.log" if self.log_dir is not None else None
            log_start = await trio.to_thread.run_sync(_size, log_path)
            process = await open_server(
                [config.command, *config.args], cwd, env, self.owned, log_path
            )
            server.pid = process.pid
            try:
                yield StdioTransport(
                    process, name=server.name, log_path=log_path, log_start=log_start
                )
            finally:
                server.pid = None
                await stop_server(process, self.grace, self.owned)
            return
        if not self._serving:
            raise McpUnavailable("the daemon is stopping")
        transport = HttpTransport(
            config.url, config.headers, name=server.name, client=self._http_client()
        )
        try:
            yield transport
        finally:
            await transport.close()


def _unavailable(server: _Server) -> str:
    why = f": {server.last_error}" if server.last_error else ""
    return f"MCP server {server.name} is {server.state}{why}"


def _size(path: Path | None) -> int:
    """The size of the file at `path` (0: none, or unreadable)."""
    if path is None:
        return 0
    try:
        return path.stat().st_size
    except OSError:
        return 0
