"""Who may use `tether web`: the rules every request and every websocket meets before anything
else is read or done. Pure functions of the request's headers; no I/O.

A server on a loopback port is reachable by every web page the user's browser opens, so:

- `Host` must name this server (its address, or for a loopback server localhost, 127.0.0.1
  or [::1], with its port): a page on an attacker's domain that resolves to 127.0.0.1 (DNS
  rebinding) sends its own name and is refused;
- `Origin`, when sent (browsers always send it on websockets and POSTs), must be this
  server's own origin: another site's page cannot drive it (cross-site websocket hijacking,
  CSRF);
- then a credential: the cookie (`cookie_name`) holding the server's secret, or the printed
  token as `Authorization: Bearer TOKEN` (for scripts). The token in the printed URL is traded
  for the cookie by `GET /?token=TOKEN` and stays valid for the server's life (and its next
  lives on the same port, `tether.clients.web.credentials`), so the same URL opens the page in
  a second browser or on another device. The cookie's value is not the
  token but a second secret: the token is shown in a terminal and may
  end up in a shell history, the cookie never leaves the browsers that have it. Both are
  compared in constant time.

Refusals: 403 for Host and Origin, 401 for a missing or wrong credential, each with a short
reason that names nothing secret.
"""

import hmac
import ipaddress
import secrets

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class Refused(Exception):
    """A request that may not go on: `status` (401, 403, ...) and a reason for the body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def is_loopback(host: str) -> bool:
    """Whether `host` (a --host value) is a loopback name or address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether `host` is an address meaning every interface (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as it appears in a URL (an IPv6 address in brackets), lowercased."""
    host = host.lower()
    return f"[{host.strip('[]')}]" if ":" in host else host


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header `name` (lowercase), as text; None when absent."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class Gate:
    """The credentials of one server's life and the names it answers to.

    `host` and `port` are where it listens; `tls` whether it speaks https. `token` (the URL's)
    and `secret` (the cookie's) are fresh random values unless given."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: bool,
        token: str | None = None,
        secret: str | None = None,
    ) -> None:
        self.tls = tls
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self.secret = secret or secrets.token_urlsafe(32)
        self.cookie_name = f"tether_web_{port}"
        scheme = "https" if tls else "http"
        names = [url_host(host)]
        if is_loopback(host):
            names += [n for n in LOOPBACK_NAMES if n not in names]
        default_port = 443 if tls else 80
        hosts = {f"{name}:{port}" for name in names}
        if port == default_port:
            hosts |= set(names)
        self.hosts = frozenset(hosts)
        self.origins = frozenset(f"{scheme}://{h}" for h in hosts)
        self.url = f"{scheme}://{url_host(host)}:{port}/?token={self.token}"

    def check_site(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise `Refused` (403) unless Host names this server and Origin, when sent, is its
        own."""
        host = header(headers, b"host")
        if host is None or host.lower() not in self.hosts:
            raise Refused(403, "the Host header does not name this server")
        origin = header(headers, b"origin")
        if origin is not None and origin.lower() not in self.origins:
            raise Refused(403, "requests from other sites are not allowed")

    def check_credential(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise `Refused` (401) unless the request carries the cookie or the bearer token."""
        if self.credential_ok(headers):
            return
        raise Refused(
            401, "not signed in: open the URL `tether web` printed (it carries ?token=...)"
        )

    def credential_ok(self, headers: list[tuple[bytes, bytes]]) -> bool:
        auth = header(headers, b"authorization") or ""
        scheme, _, presented = auth.partition(" ")
        if scheme.lower() == "bearer" and self.token_ok(presented.strip()):
            return True
        for key, value in headers:
            if key.lower() != b"cookie":
                continue
            for part in value.split(b";"):
                name, _, cookie = part.strip().partition(b"=")
                if name == self.cookie_name.encode() and hmac.compare_digest(
                    cookie, self.secret.encode()
                ):
                    return True
        return False

    def token_ok(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def set_cookie(self) -> bytes:
        """The Set-Cookie value that signs a browser in."""
        secure = "; Secure" if self.tls else ""
        return (
            f"{self.cookie_name}={self.secret}; HttpOnly; SameSite=Strict; Path=/{secure}"
        ).encode()
