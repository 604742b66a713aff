"""MCP servers a client gives one session (`session/configure`'s `mcpServers`): an editor
passes those its user configured there.

Each session given servers has a pool of its own (`McpPool`, so starts, restarts, calls and
stops go as for the configured servers), run in this object's nursery, beside the daemon's
pool and not in it: its tools are offered to that session's turns only, and its servers
stop when the session lets them go.

Rules:
- The user chose them in their client, so they run without the approval a workspace's
  servers need (their definitions are of source `user`).
- They belong to the connection that gave them: `held` says whether it still holds the
  session (it has not detached from it, nor closed). `release`, called whenever the
  session's subscribers change, drops them once it does not, checked after the current
  step; a subscriber the daemon dropped for falling behind still holds the session (it
  re-attaches), and so keeps them.
- Giving an empty list, or deleting the session, drops them; the daemon stopping stops them.
- Their stderr logs go under `sessions/SESSION_ID/` of the daemon's MCP log folder.
"""

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from tether.daemon.mcp.client import McpTool, OnProgress
from tether.daemon.mcp.config import NAME, McpServerConfig, ServerDefinition, bad_names
from tether.daemon.mcp.errors import McpUnavailable
from tether.daemon.mcp.pool import McpPool
from tether.daemon.nursery import LentNursery
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import SessionMcpServer


def definitions_of(servers: list[SessionMcpServer]) -> list[ServerDefinition]:
    """The servers a client gives a session, as definitions of the user's (the client's user
    chose them). RpcError(INVALID_PARAMS) naming the first that is wrong."""
    definitions: list[ServerDefinition] = []
    for index, server in enumerate(servers):
        where = f"mcpServers[{index}]"
        if not NAME.match(server.name):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"{where}: {bad_names([server.name])}")
        if any(d.name == server.name for d in definitions):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"{where}: {server.name!r} is given twice")
        try:
            config = McpServerConfig(
                command=server.command,
                args=server.args,
                env=server.env,
                url=server.url,
                headers=server.headers,
            )
        except ValueError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"{where} ({server.name}): {exc}") from exc
        definitions.append(
            ServerDefinition(name=server.name, source="user", config=config, origin="the client")
        )
    return definitions


class _SessionPool:
    def __init__(self, pool: McpPool, held: Callable[[], bool]) -> None:
        self.pool = pool
        self.held = held
        self.scope = trio.CancelScope()
        self.stopped = trio.Event()


class SessionServers:
    """The session-scoped MCP pools of a workspace, made like `base` (the daemon's pool)."""

    def __init__(self, base: McpPool) -> None:
        self._base = base
        self._pools: dict[str, _SessionPool] = {}
        self._lent = LentNursery()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; then every session's servers are stopped before this returns."""
        async with trio.open_nursery() as nursery:
            await self._lent.lend(nursery, task_status)

    async def ensure_started(
        self, session_id: str, taken: set[str]
    ) -> tuple[list[tuple[ServerDefinition, McpTool]], list[str]]:
        """The tools of the session's running servers, started first (`McpPool.ensure_started`),
        and the problems to report. A server named as one of `taken` (the daemon's own) is
        left out: tool names must not collide."""
        entry = self._pools.get(session_id)
        if entry is None:
            return [], []
        problems = await entry.pool.ensure_started()
        offered = entry.pool.offered()
        problems += [
            f"The MCP server {name} given to this session is left out: your tether settings or "
            "the workspace define a server of that name"
            for name in sorted({d.name for d, _ in offered} & taken)
        ]
        return [(d, tool) for d, tool in offered if d.name not in taken], problems

    def caller(
        self, session_id: str
    ) -> Callable[[str, str, dict[str, object], OnProgress], Awaitable[dict[str, object]]]:
        """Calls (server, tool, arguments, where its progress reports go) of the session's
        servers as they are at the call (`McpPool.call`); McpUnavailable once they were
        dropped."""

        async def call(
            name: str, tool: str, arguments: dict[str, object], on_progress: OnProgress
        ) -> dict[str, object]:
            entry = self._pools.get(session_id)
            if entry is None:
                raise McpUnavailable(
                    f"the MCP server {name} given to this session was stopped (its client left)"
                )
            return await entry.pool.call(name, tool, arguments, on_progress=on_progress)

        return call

    async def give(
        self, session_id: str, definitions: list[ServerDefinition], *, held: Callable[[], bool]
    ) -> None:
        """Run these servers for the session from its next turn on, in place of those given
        before (a server defined as before keeps running), while `held` (see the rules);
        none: drop them. RuntimeError when the daemon is stopping."""
        if not definitions:
            await self.drop(session_id)
            return
        entry = self._pools.get(session_id)
        if entry is None:
            nursery = self._lent.nursery
            if nursery is None:
                raise RuntimeError("the daemon is stopping")
            # Registered before its start is awaited, so that a give meanwhile finds it.
            entry = self._pools[session_id] = _SessionPool(self._make_pool(session_id), held)
            await nursery.start(self._run, session_id, entry)
        entry.held = held
        entry.pool.configure(definitions)

    def _make_pool(self, session_id: str) -> McpPool:
        base = self._base
        logs: Path | None = (
            base.log_dir / "sessions" / session_id if base.log_dir is not None else None
        )
        return McpPool(
            base.workspace,
            owned=base.owned,
            on_event=base.on_event,
            log_dir=logs,
            backoff=base.backoff,
            max_backoff=base.max_backoff,
            grace=base.grace,
            probe_timeout=base.probe_timeout,
        )

    async def _run(
        self,
        session_id: str,
        entry: _SessionPool,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with entry.scope:
                await entry.pool.serve(task_status=task_status)
        finally:
            if self._pools.get(session_id) is entry:
                del self._pools[session_id]
            entry.stopped.set()

    async def drop(self, session_id: str) -> None:
        """Stop the session's servers and wait until they are stopped."""
        entry = self._pools.pop(session_id, None)
        if entry is not None:
            entry.scope.cancel()
            await entry.stopped.wait()

    def release(self, session_id: str) -> None:
        """Drop the session's servers, after the current step, if the connection that gave
        them does not hold the session then."""
        entry = self._pools.get(session_id)
        nursery = self._lent.nursery
        if entry is None or nursery is None:
            return

        async def check() -> None:
            if self._pools.get(session_id) is entry and not entry.held():
                await self.drop(session_id)

        nursery.start_soon(check)
