"""What `/api/workspaces` answers and `/ws/overview` pushes: every workspace with its sessions.

Rules:
- while at least one page watches (`watch`), the overview looks every `interval` seconds:
  which daemons run (lock probes, file reads: cheap), and each running daemon's `session/list`
  over one connection kept open to it; a change of anything shown wakes every watcher, which
  sends the whole list again;
- while no page watches, it keeps no connection open: an open connection is a client, and a
  daemon with a client never stops for idleness; `snapshot` then looks once with connections
  of its own, closed again before it returns;
- a daemon that does not answer within `CALL_TIMEOUT` is shown running with the sessions last
  seen (none at first), and its connection is opened again at the next look.
"""

import contextlib
import sys
from collections.abc import AsyncGenerator
from typing import cast

import msgspec
import trio

from tether.clients.core import discovery
from tether.clients.web.workspaces import (
    DaemonGone,
    DaemonLink,
    Known,
    Running,
    look,
    workspace_json,
)
from tether.protocol.discovery import DiscoveryInfo

INTERVAL = 1.0


class Overview:
    """The workspaces as pages see them. Run `serve` in a nursery before `watch`."""

    def __init__(self, *, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.workspaces: list[dict[str, object]] = []
        """The latest look, as the page reads it."""
        self.version = 0
        """Grows by one at every change of `workspaces`."""
        self._changed = trio.Event()
        self._watchers = 0
        self._watched = trio.Event()
        self._links: dict[str, DaemonLink] = {}
        self._sessions: dict[str, list[object]] = {}
        self._encoded = b""
        self._refresh_lock = trio.Lock()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look every `interval` seconds while a page watches. Cancelling it closes the
        connections it holds."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    await self._watched.wait()
                    while self._watchers:
                        await self.refresh()
                        await trio.sleep(self.interval)
                    self._drop_links()
            finally:
                self._drop_links()

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncGenerator["Overview"]:
        """Keep the overview looking while this is entered; `wait_changed` then wakes on
        changes."""
        self._watchers += 1
        self._watched.set()
        try:
            yield self
        finally:
            self._watchers -= 1
            if not self._watchers:
                self._watched = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        """Wait until `version` is past `seen`; return it."""
        while self.version <= seen:
            await self._changed.wait()
        return self.version

    async def snapshot(self) -> list[dict[str, object]]:
        """The workspaces now: the latest look while pages watch, else a fresh one."""
        if not self._watchers:
            await self.refresh()
            if not self._watchers:
                self._drop_links()
        return self.workspaces

    async def poke(self) -> None:
        """Something shown may have changed (a daemon was started): look now if pages watch."""
        if self._watchers:
            await self.refresh()

    async def refresh(self) -> None:
        """Look once; wake the watchers if anything shown changed."""
        async with self._refresh_lock:
            discovery.reap_spawned()
            try:
                known: Known = await trio.to_thread.run_sync(look)
            except OSError as exc:
                # The runtime dir unusable, say: what was shown stays, and the next look retries.
                print(f"tether web: cannot list the workspaces: {exc}", file=sys.stderr)
                return
            for key in [k for k in self._links if k not in known.running]:
                self._drop_link(key)
                self._sessions.pop(key, None)
            async with trio.open_nursery() as nursery:
                for key, daemon in known.running.items():
                    nursery.start_soon(self._list_sessions, key, daemon)
            workspaces = [
                workspace_json(key, root, key in known.running, self._sessions.get(key, []))
                for key, root in known.roots.items()
            ]
            encoded = msgspec.json.encode(workspaces)
            if encoded != self._encoded:
                self._encoded = encoded
                self.workspaces = workspaces
                self.version += 1
                self._changed.set()
                self._changed = trio.Event()

    async def _list_sessions(self, key: str, daemon: Running) -> None:
        link = self._links.get(key)
        if link is not None and link.info.pid != daemon.info.pid:
            self._drop_link(key)
            link = None
        try:
            if link is None:
                link = self._links[key] = await self._nursery.start(self._hold_link, daemon.info)
            result = await link.call("session/list", {})
        except DaemonGone:
            self._drop_link(key)
            return
        answer = cast("dict[str, object]", result) if isinstance(result, dict) else {}
        sessions = answer.get("sessions")
        self._sessions[key] = cast("list[object]", sessions) if isinstance(sessions, list) else []

    async def _hold_link(
        self, info: DiscoveryInfo, *, task_status: trio.TaskStatus[DaemonLink]
    ) -> None:
        """Keep a connection to the daemon open until `_drop_link` drops it (a call on a
        connection the daemon closed fails, and the caller drops it). Raises `DaemonGone` (to
        `start`'s caller) when it cannot be opened."""
        async with DaemonLink.opened(info) as link:
            task_status.started(link)
            await link.dropped.wait()

    def _drop_link(self, key: str) -> None:
        link = self._links.pop(key, None)
        if link is not None:
            link.dropped.set()

    def _drop_links(self) -> None:
        for key in list(self._links):
            self._drop_link(key)
