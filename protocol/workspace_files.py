"""The names of the files where a workspace's daemon and its clients meet (the discovery file
in the runtime dir, the lock file in the workspace's data folder, see
`tether.protocol.discovery`), and how often the daemon checks them.

Standard library only, without msgspec: a client that finds no daemon has to start one, and
every millisecond it spends importing before the spawn adds to its first answer, so what it
needs before the spawn lives here.
"""

from tether.protocol.hashes import sha256

DISCOVERY_CHECK_INTERVAL = 1.0
"""Seconds between a serving daemon's checks that its discovery file is still there."""


def workspace_key(workspace: str) -> str:
    """A short, filesystem-safe key for an absolute, resolved workspace path."""
    return sha256(workspace.encode()).hexdigest()[:16]


def discovery_name(workspace: str) -> str:
    return f"daemon-{workspace_key(workspace)}.json"


LOCK_NAME = "daemon.lock"
"""The lock file's name in the workspace's data folder, beside its session database."""
