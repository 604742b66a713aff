"""The URL token and the cookie secret of `tether web` on a fixed port, kept across restarts.

A page left open while `tether web` restarts (an upgrade, a reboot) reconnects by itself only
if its cookie is still good, and a bookmark of the printed URL keeps working only if its token
is: so a server on a fixed port keeps both in `web-<port>.json` in the user's state folder,
owner-only, and reuses them at its next start on that port. `--new-token` makes a new pair,
which signs every browser out and retires every copy of the old URL. A server on `--port 0`
keeps nothing (its port, and so its origin, changes anyway).

A file that is not owner-only, or not a pair of long enough secrets, is not trusted: a new
pair replaces it.
"""

import contextlib
import json
import os
import secrets
import stat
from pathlib import Path

from tether.protocol.places import state_dir

MIN_LENGTH = 32


def credentials_path(port: int) -> Path:
    return state_dir() / f"web-{port}.json"


def kept_credentials(port: int, *, renew: bool = False) -> tuple[str, str]:
    """(token, secret) for a server on `port`: the kept pair, or (none kept, an untrusted
    file, or `renew`) a new one, kept from now on. Raises OSError when the pair cannot be
    kept."""
    path = credentials_path(port)
    if not renew:
        kept = _read(path)
        if kept is not None:
            return kept
    token, secret = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    _write(path, {"token": token, "secret": secret})
    return token, secret


def _read(path: Path) -> tuple[str, str] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
            return None
        try:
            value: object = json.loads(file.read(4096))
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    token, secret = value.get("token"), value.get("secret")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if not (isinstance(token, str) and isinstance(secret, str)):
        return None
    if min(len(token), len(secret)) < MIN_LENGTH or token == secret:
        return None
    return token, secret


def _write(path: Path, value: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(value, file)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
