"""What signs a browser in to `tether web` on one port, kept across restarts: the token of the
printed URL and the secret of the cookie it is traded for. A page left open while the server
restarts on the same port then reconnects with the cookie it has (a browser cannot sign in
again by itself: it has no token, and a refused websocket does not even say why), and the
printed URL, like a bookmark of it, stays good.

Rules:
- one owner-only JSON file per port (`tether.protocol.places.web_credentials_path`),
  `{"token": ..., "secret": ...}`, replaced atomically;
- a missing file, or one that is not such a record, means fresh credentials;
- port 0 (any free port) has none to reuse; the port it got is remembered like any other.
"""

from pathlib import Path

import msgspec

from tether.daemon.private_json import write_private_json
from tether.protocol.places import web_credentials_path


class Credentials(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    secret: str


def recall(port: int, path: Path | None = None) -> Credentials | None:
    """The credentials kept for `port`, or None (none kept, port 0, or a file not readable as
    them). Blocking."""
    if port == 0:
        return None
    path = web_credentials_path(port) if path is None else path
    try:
        found = msgspec.json.decode(path.read_bytes(), type=Credentials)
    except (OSError, msgspec.DecodeError):
        return None
    return found if found.token and found.secret else None


def keep(port: int, credentials: Credentials, path: Path | None = None) -> None:
    """Keep `credentials` for `port` (0600). Blocking; an OSError propagates."""
    path = web_credentials_path(port) if path is None else path
    write_private_json(path, msgspec.to_builtins(credentials))
