"""The discovery file and the lock file: how a client finds the daemon serving a workspace,
and how it knows that daemon is alive.

The daemon writes the discovery file (owner-only) into the user runtime dir when it is ready to
accept connections and removes it on exit. Its name is derived from the workspace path so that
each workspace has its own daemon. Computing where the runtime dir is belongs to the caller.

Liveness is the lock file, never a pid: the daemon holds an exclusive `flock` on it for its
whole life (the kernel drops it the moment the process dies, zombie or not) and keeps a
`LockRecord` in it. The lock lives in the workspace's data folder, beside the session database
it guards, not in the runtime dir: which runtime dir a process picks depends on its
environment (`XDG_RUNTIME_DIR` set or not, `/run/user/UID` present or not), and two processes
that pick differently must still find the one daemon. The record names where that daemon's
discovery file is. A client whose non-blocking shared `flock` succeeds knows no daemon runs,
whatever any discovery file says. A serving daemon puts back a discovery file that went
missing within `DISCOVERY_CHECK_INTERVAL` seconds.
"""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.workspace_files import (
    DISCOVERY_CHECK_INTERVAL,
    LOCK_NAME,
    discovery_name,
    workspace_key,
)

__all__ = [
    "DISCOVERY_CHECK_INTERVAL",
    "LOCK_NAME",
    "DiscoveryInfo",
    "LockRecord",
    "LockState",
    "RecentWorkspaces",
    "discovery_name",
    "workspace_key",
]

LockState = Literal["starting", "serving", "stopping"]


class DiscoveryInfo(Wire, frozen=True, kw_only=True):
    """The discovery file: `tether/daemon-<key>.json` in the runtime dir (`$XDG_RUNTIME_DIR`
    when it is fit for secrets, see `tether.protocol.places`), owner-only, where
    `key` is the first 16 hex digits of the SHA-256 of the workspace's absolute, resolved
    path (UTF-8). Written once the daemon accepts connections, removed when it exits. A file
    left by a daemon that crashed is stale: the daemon is alive only while it holds an `flock`
    on the workspace's lock file (`LOCK_NAME` in its data folder), so a client whose
    non-blocking shared `flock` on that file succeeds knows that no daemon runs, whatever
    this file says."""

    pid: int
    port: int
    """The daemon's port on 127.0.0.1."""
    token: str
    """The bearer token of this daemon's life (`Authorization: Bearer <token>`); a new one
    at every start."""
    protocol_version: int
    daemon_version: str
    workspace: str
    """The absolute, resolved workspace path."""
    started_at: float
    """Seconds since the Unix epoch (a float)."""


class LockRecord(Wire, frozen=True, kw_only=True):
    """What the daemon holding a workspace's lock writes into the lock file. Only the holder
    writes it, so while the lock is held it describes the live daemon (a reader may catch it
    half-written, or in the instant between a new holder's `flock` and its first write)."""

    pid: int
    state: LockState
    started_at: float
    """When this daemon took the lock (Unix time): how long a `starting` daemon has taken."""
    discovery: str = ""
    """Where this daemon's discovery file is, once it serves ("" before): the file in its own
    runtime dir, which a client whose environment picks another runtime dir finds here."""


class RecentWorkspaces(Wire, frozen=True, kw_only=True):
    """The recent workspaces file (`tether.protocol.places.recent_workspaces_path`): the roots
    daemons of this user have served on this machine, newest first, at most 20. Each daemon
    puts its own first once it serves; roots that are no longer folders are dropped."""

    roots: list[str] = []
