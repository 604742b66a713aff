"""Who may open a websocket to the daemon.

A local agent server is a target for any web page the user visits (DNS rebinding, cross-site
websocket hijacking), so the upgrade is refused unless: the `Host` header names a loopback
address, any browser `Origin` is on the allowlist (empty by default), and the bearer token
matches, compared in constant time.
"""

import hmac

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def check_upgrade(
    host: str | None,
    headers: list[tuple[bytes, bytes]],
    token: str,
    allowed_origins: frozenset[str] = frozenset(),
) -> tuple[int, str] | None:
    """None when the upgrade may proceed, else (HTTP status, reason)."""
    if host is None or _hostname(host).lower() not in LOOPBACK_HOSTS:
        return 403, "the Host header must name a loopback address"
    origin = _header(headers, b"origin")
    if origin is not None and origin not in allowed_origins:
        return 403, f"origin {origin!r} is not allowed"
    auth = _header(headers, b"authorization") or ""
    scheme, _, presented = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        presented.strip().encode(), token.encode()
    ):
        return 401, "missing or wrong bearer token (see the daemon's discovery file)"
    return None
