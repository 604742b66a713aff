"""The discovery file: how a client finds the daemon serving a workspace.

The daemon writes it (owner-only) into the user runtime dir when it is ready to accept
connections and removes it on exit. Its name is derived from the workspace path so that each
workspace has its own daemon. Computing where the runtime dir is belongs to the caller.
"""

import hashlib

from tether.protocol.base import Wire


class DiscoveryInfo(Wire, frozen=True, kw_only=True):
    pid: int
    port: int
    token: str
    protocol_version: int
    daemon_version: str
    workspace: str
    started_at: float


def workspace_key(workspace: str) -> str:
    """A short, filesystem-safe key for an absolute, resolved workspace path."""
    return hashlib.sha256(workspace.encode()).hexdigest()[:16]


def discovery_name(workspace: str) -> str:
    return f"daemon-{workspace_key(workspace)}.json"


def lock_name(workspace: str) -> str:
    return f"daemon-{workspace_key(workspace)}.lock"
