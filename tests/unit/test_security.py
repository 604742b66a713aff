"""Who may open the daemon's websocket: `check_upgrade` called directly with the Host and
headers of an upgrade request."""

import pytest

from tether.daemon.rpc.security import check_upgrade

TOKEN = "ab" * 32
BEARER = (b"Authorization", f"Bearer {TOKEN}".encode())


def check(
    host: str | None,
    *headers: tuple[bytes, bytes],
    allowed: frozenset[str] = frozenset(),
) -> int | None:
    refusal = check_upgrade(host, list(headers), TOKEN, allowed)
    return None if refusal is None else refusal[0]


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8765", "localhost:1", "LOCALHOST", "[::1]", "[::1]:9", "::1"]
)
def test_a_loopback_host_with_the_token_is_let_in(host: str) -> None:
    assert check(host, BEARER) is None


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "evil.example",
        "evil.example:8765",
        "127.0.0.1.evil.example",
        "localhost.evil.example:80",
        "[::2]:80",
        "10.0.0.1",
    ],
)
def test_a_host_that_is_not_loopback_is_refused_with_403(host: str | None) -> None:
    refusal = check_upgrade(host, [BEARER], TOKEN)
    assert refusal is not None
    assert refusal[0] == 403
    assert "Host" in refusal[1]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        b"",
        b"Bearer",
        b"Bearer ",
        b"Basic " + TOKEN.encode(),
        b"Bearer " + TOKEN[:-1].encode(),
        b"Bearer " + TOKEN.encode() + b"0",
        b"Bearer " + TOKEN.upper().encode(),
        b"Bearer" + TOKEN.encode(),
    ],
)
def test_a_missing_or_wrong_token_is_refused_with_401(authorization: bytes | None) -> None:
    headers = [] if authorization is None else [(b"authorization", authorization)]
    refusal = check_upgrade("127.0.0.1", headers, TOKEN)
    assert refusal is not None
    assert refusal[0] == 401
    assert TOKEN not in refusal[1]


def test_the_scheme_and_header_name_are_case_insensitive_and_spaces_trimmed() -> None:
    assert check("127.0.0.1", (b"AUTHORIZATION", f"bearer   {TOKEN} ".encode())) is None


def test_a_browser_origin_is_refused_with_403_before_the_token_is_looked_at() -> None:
    origin = (b"Origin", b"https://evil.example")
    assert check("127.0.0.1", origin, BEARER) == 403
    assert check("127.0.0.1", origin) == 403
    # A web page on loopback is a browser page all the same.
    assert check("127.0.0.1", (b"origin", b"http://127.0.0.1:3000"), BEARER) == 403


def test_an_allowlisted_origin_still_needs_the_token() -> None:
    allowed = frozenset({"vscode-webview://tether"})
    origin = (b"origin", b"vscode-webview://tether")
    assert check("localhost", origin, BEARER, allowed=allowed) is None
    assert check("localhost", origin, allowed=allowed) == 401
    assert (
        check("localhost", (b"origin", b"vscode-webview://other"), BEARER, allowed=allowed) == 403
    )


def test_the_first_of_repeated_headers_counts() -> None:
    wrong = (b"authorization", b"Bearer nope")
    assert check("127.0.0.1", wrong, BEARER) == 401
    assert check("127.0.0.1", BEARER, wrong) is None
