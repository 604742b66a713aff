"""The daemon's share of open files.

Rules:
- At start the soft `RLIMIT_NOFILE` is raised to the hard limit (the default soft limit, often
  1,024, is meant for programs that do not serve many sockets). An unlimited hard limit is
  taken as `UNLIMITED_CAP`. Commands the daemon starts inherit the raised limit.
- Connections that have not finished their websocket handshake may hold at most a quarter of
  what is left once `RESERVED_DESCRIPTORS` are set aside (the store, logs, language-server,
  MCP and command pipes, and authenticated clients), and never more than
  `MAX_PENDING_HANDSHAKES`: a flood of half-open connections cannot take the descriptors an
  authenticated client needs.
"""

import resource

from tether.daemon.rpc.websocket import MAX_PENDING_HANDSHAKES

RESERVED_DESCRIPTORS = 128
UNLIMITED_CAP = 1 << 20


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one. Returns (the soft limit before, the
    soft limit now); a limit the system refuses to raise stays as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def pending_handshake_limit(open_files: int | None = None) -> int:
    """How many connections may wait for their handshake at once, for a process allowed
    `open_files` descriptors (default: the soft limit in force); at least 1."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if open_files == resource.RLIM_INFINITY:
            open_files = UNLIMITED_CAP
    return max(1, min(MAX_PENDING_HANDSHAKES, (open_files - RESERVED_DESCRIPTORS) // 4))
