"""The workspaces `tether web` shows: every daemon of this user on this machine, found as the
CLI finds one, and the recent workspaces that are not running.

Running daemons are found from their locks: each workspace a daemon ever served has a folder
in the data dir named by its key (`workspaces/<key>/daemon.lock`); a lock some process holds
is a live daemon, and its record names its discovery file (the port, the token and the
workspace's root). A daemon of an earlier tether, locked in the runtime dir, is found from its
discovery file there. The recent list is what daemons wrote as they started
(`tether.daemon.server.recent`); only roots in it, or running, can be started from the page.

A workspace's `id` is its key, the first 16 hex digits of the SHA-256 of its root.

`DaemonLink` is one JSON-RPC connection to a daemon (the overview's `session/list`); the relay
to the page is in `tether.clients.web.relay`.
"""

import contextlib
import os
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import cast

import msgspec
import trio
import trio_websocket

from tether.clients.core import discovery
from tether.protocol.discovery import DiscoveryInfo, RecentWorkspaces
from tether.protocol.places import data_dir, recent_workspaces_path, runtime_dir
from tether.protocol.transport import HOST, MAX_MESSAGE_BYTES
from tether.protocol.version import PROTOCOL_VERSION, __version__
from tether.protocol.workspace_files import LOCK_NAME, workspace_key

CLIENT_NAME = "tether web"
CALL_TIMEOUT = 5.0
"""Seconds a daemon has to answer the overview's connection and `session/list`."""
RECEIVE_BYTES = 64 * 1024
"""What one read of a daemon's socket takes (trio-websocket reads 4 KiB by default)."""


class Running(msgspec.Struct, frozen=True):
    """A daemon that serves a workspace now: its root and its discovery record."""

    root: str
    info: DiscoveryInfo


def running_daemons() -> dict[str, Running]:
    """Every daemon of this user serving a workspace on this machine, by workspace id.
    Blocking (small file reads and lock probes)."""
    found: dict[str, Running] = {}
    folder = data_dir() / "workspaces"
    try:
        keys = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError:
        keys = []
    for key in keys:
        held = discovery.probe_lock(folder / key / LOCK_NAME)
        if held is None or held.record is None or held.record.state != "serving":
            continue
        path = _discovery_file(key, held.record.discovery)
        info = _read_info(path)
        if info is None or info.pid != held.record.pid:
            continue
        if workspace_key(info.workspace) == key:
            found[key] = Running(info.workspace, info)
    # Daemons of an earlier tether lock a file in the runtime dir, beside their discovery file.
    try:
        former = sorted(runtime_dir().glob("daemon-*.lock"))
    except OSError:
        former = []
    for lock in former:
        key = lock.stem.removeprefix("daemon-")
        if key in found or discovery.probe_lock(lock) is None:
            continue
        info = _read_info(lock.with_suffix(".json"))
        if info is not None and workspace_key(info.workspace) == key:
            found[key] = Running(info.workspace, info)
    return found


def _discovery_file(key: str, recorded: str) -> Path:
    name = f"daemon-{key}.json"
    if recorded:
        named = Path(recorded)
        if named.is_absolute() and named.name == name:
            return named
    return runtime_dir() / name


def _read_info(path: Path) -> DiscoveryInfo | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=DiscoveryInfo)
    except (OSError, msgspec.DecodeError):
        return None


def recent_roots() -> list[str]:
    """The recent list's roots that are still folders, newest first. Blocking."""
    try:
        raw = recent_workspaces_path().read_bytes()
        recorded = msgspec.json.decode(raw, type=RecentWorkspaces)
    except (OSError, msgspec.DecodeError):
        return []
    return [r for r in recorded.roots if os.path.isabs(r) and os.path.isdir(r)]


class Known(msgspec.Struct, frozen=True):
    """The workspaces of one look: running daemons by id, and every root shown, in order."""

    running: dict[str, Running]
    roots: dict[str, str]
    """Workspace id → root, the order the page shows them: running ones the recent list does
    not name first, then the recent list's order."""


def look() -> Known:
    """What runs and what ran recently, now. Blocking."""
    running = running_daemons()
    recent = {workspace_key(root): root for root in recent_roots()}
    roots = {key: d.root for key, d in running.items() if key not in recent}
    roots.update(recent)
    return Known(running, roots)


def workspace_json(key: str, root: str, running: bool, sessions: list[object]) -> dict[str, object]:
    """One workspace as the page reads it (see the contract in docs/web.md)."""
    return {
        "id": key,
        "root": root,
        "name": Path(root).name or root,
        "running": running,
        "sessions": sessions if running else [],
    }


class DaemonGone(Exception):
    """The daemon did not answer, refused the connection, or closed it."""


class DaemonLink:
    """One JSON-RPC connection to a daemon, for one caller at a time (`call` holds a lock).
    Notifications are skipped. Made by `opened`."""

    def __init__(self, info: DiscoveryInfo, ws: trio_websocket.WebSocketConnection) -> None:
        self.info = info
        self._ws = ws
        self._lock = trio.Lock()
        self._ids = 0
        self.dropped = trio.Event()
        """Set when its holder is to close it."""

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, info: DiscoveryInfo) -> AsyncGenerator["DaemonLink"]:
        """Connect to the daemon `info` describes and send `initialize`; closed on leaving.
        Raises `DaemonGone` when that fails."""
        async with connected(info) as ws:
            link = cls(info, ws)
            await link.call(
                "initialize",
                {
                    "clientName": CLIENT_NAME,
                    "clientVersion": __version__,
                    "protocolVersion": PROTOCOL_VERSION,
                },
            )
            yield link

    async def call(self, method: str, params: Mapping[str, object]) -> object:
        """The result of `method`; raises `DaemonGone` on a lost connection, an error answer or
        no answer within `CALL_TIMEOUT`."""
        async with self._lock:
            self._ids += 1
            wanted = f"web-{self._ids}"
            frame = {"jsonrpc": "2.0", "id": wanted, "method": method, "params": params}
            try:
                with trio.fail_after(CALL_TIMEOUT):
                    await self._ws.send_message(msgspec.json.encode(frame).decode())
                    while True:
                        answer: object = msgspec.json.decode(await self._ws.get_message())
                        if isinstance(answer, dict) and answer.get("id") == wanted:
                            break
            except (trio_websocket.ConnectionClosed, trio.TooSlowError) as exc:
                raise DaemonGone(f"the daemon did not answer {method}") from exc
            except msgspec.DecodeError as exc:
                raise DaemonGone(f"the daemon answered {method} with a malformed frame") from exc
            answered = cast("dict[str, object]", answer)
            if "error" in answered:
                raise DaemonGone(f"the daemon refused {method}: {answered['error']}")
            return answered.get("result")


@contextlib.asynccontextmanager
async def connected(
    info: DiscoveryInfo, *, message_queue_size: int = 1
) -> AsyncGenerator[trio_websocket.WebSocketConnection]:
    """A websocket to the daemon `info` describes, authenticated with its token (which goes
    nowhere else), closed on leaving. Raises `DaemonGone` when it cannot be opened."""
    try:
        with trio.fail_after(CALL_TIMEOUT):
            stream = await trio.open_tcp_stream(HOST, info.port)
    except (OSError, trio.TooSlowError) as exc:
        raise DaemonGone(f"the daemon for {info.workspace} is not listening") from exc
    opened = False
    try:
        # The library's reading task raises a refused handshake into its nursery, this one,
        # which comes out as a group; the body's own exceptions come out alone, as raised.
        async with trio.open_nursery() as nursery:
            with trio.fail_after(CALL_TIMEOUT):
                ws = await trio_websocket.wrap_client_stream(
                    nursery,
                    stream,
                    f"{HOST}:{info.port}",
                    "/",
                    extra_headers=[(b"authorization", f"Bearer {info.token}".encode())],
                    message_queue_size=message_queue_size,
                    # What a daemon sends a client is bounded by its buffer (16 MiB); a
                    # snapshot larger than a frame the daemon reads is relayed whole.
                    max_message_size=4 * MAX_MESSAGE_BYTES,
                    receive_buffer_size=RECEIVE_BYTES,
                )
            opened = True
            try:
                yield ws
            finally:
                # A close handshake while the reading task still runs; when cancelled, the
                # stream is only closed.
                with trio.move_on_after(2):
                    await ws.aclose()
    except BaseExceptionGroup as group:
        lone = _lone(group)
        if lone is None:
            raise
        if not opened and isinstance(lone, trio_websocket.HandshakeError | trio.TooSlowError):
            raise DaemonGone(f"the daemon for {info.workspace} refused the connection") from lone
        raise lone from None
    finally:
        await trio.aclose_forcefully(stream)


def _lone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in `group` (nested groups looked into), or None when it holds more."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = cast("BaseExceptionGroup[BaseException]", inner)
    return None


def start(root: str) -> str | None:
    """Start the daemon of `root` as the CLI does (unless one runs) and wait until it serves;
    None when it does, else why not. Blocking (up to `discovery.START_TIMEOUT`)."""
    discovery.reap_spawned()
    workspace = Path(root)
    if not workspace.is_dir():
        return f"{root} is not a folder any more"
    try:
        discovery.locate(workspace, autostart=True)
    except discovery.DaemonUnavailable as exc:
        return str(exc)
    return None
