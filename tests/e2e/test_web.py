"""`tether web`: the server in this process under trio, real sockets on 127.0.0.1, real
daemons, a browser played by `tests.web_client.Page`; one test runs the real command."""

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
import trio_websocket

from tests.conftest import make_workspace
from tests.support import (
    DaemonProcess,
    Home,
    cli,
    create_session,
    free_port,
    start_daemon,
    wait_until,
)
from tests.web_client import Page
from tether.clients.web.relay import LOST_DAEMON
from tether.clients.web.security import Gate
from tether.clients.web.server import WebServer
from tether.daemon.server.recent import remember
from tether.protocol.methods import DAEMON_STATUS, SESSION_LIST
from tether.protocol.places import recent_workspaces_path
from tether.protocol.workspace_files import workspace_key

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]


@pytest.fixture
def activated(home: Home) -> Iterator[Home]:
    """`home` as this process's environment: where the in-process server looks for daemons."""
    with home.activated():
        yield home


async def serve(
    nursery: trio.Nursery, static_dir: Path | None = None, **options: Any
) -> tuple[WebServer, Gate]:
    server = WebServer(
        "127.0.0.1",
        0,
        overview_interval=0.05,
        **({} if static_dir is None else {"static_dir": static_dir}),
        **options,
    )
    gate: Gate = await nursery.start(server.serve)
    return server, gate


@pytest.fixture
async def page(nursery: trio.Nursery, activated: Home) -> Page:
    """A browser tab signed in to a fresh server."""
    _server, gate = await serve(nursery)
    tab = Page(gate.url)
    await tab.sign_in()
    return tab


async def call(ws: trio_websocket.WebSocketConnection, id_: str, method: str, params: JSON) -> JSON:
    """Send a request; the answer to it (notifications before it are skipped)."""
    await ws.send_message(
        json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
    )
    while True:
        frame = json.loads(await ws.get_message())
        if frame.get("id") == id_:
            assert "error" not in frame, frame
            return frame["result"]


async def initialize(ws: trio_websocket.WebSocketConnection) -> None:
    await call(ws, "init", "initialize", {"clientName": "tether web"})


async def test_the_printed_token_is_traded_for_a_cookie_and_leaves_the_address(
    nursery: trio.Nursery, activated: Home
) -> None:
    _server, gate = await serve(nursery)
    tab = Page(gate.url)
    assert gate.url.startswith("http://127.0.0.1:")
    with trio.fail_after(10):
        answer = await tab.sign_in()
        assert answer.status == 303
        assert answer.header("location") == "/"
        cookie = answer.header("set-cookie") or ""
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "Path=/" in cookie
        assert "Secure" not in cookie
        # The cookie holds the server's secret, not the token that was in the URL.
        assert gate.token not in cookie
        home = await tab.fetch("/", headers=tab.headers())
        assert home.status == 200
        assert (
            home.body == (Path(__file__).parents[2] / "clients/web/static/index.html").read_bytes()
        )
        assert home.header("content-type") == "text/html; charset=utf-8"
        assert "default-src 'none'" in (home.header("content-security-policy") or "")
        assert "frame-ancestors 'none'" in (home.header("content-security-policy") or "")
        assert home.header("x-content-type-options") == "nosniff"
        assert home.header("referrer-policy") == "no-referrer"
        assert home.header("cache-control") == "no-store"
        # The URL stays good for a second browser (another tab, another device).
        assert (await Page(gate.url).sign_in()).status == 303


async def test_requests_without_the_cookie_are_refused(page: Page) -> None:
    with trio.fail_after(10):
        for target, method in [
            ("/", "GET"),
            ("/static/index.html", "GET"),
            ("/api/workspaces", "GET"),
            ("/api/workspaces/0123456789abcdef/start", "POST"),
        ]:
            bare = await page.fetch(target, method, headers=page.headers(cookie=False))
            assert bare.status == 401, target
            assert b"tether web" in bare.body
            wrong = await page.fetch(
                target, method, headers=[("cookie", page.cookie[:-4] + "AAAA")]
            )
            assert wrong.status == 401, target
        assert (await page.fetch("/?token=not-the-token")).status == 401
        # A script may use the token as a bearer token instead.
        bearer = await page.fetch(
            "/api/workspaces", headers=[("authorization", f"Bearer {page.token}")]
        )
        assert bearer.status == 200
        assert (await page.fetch("/api/workspaces", headers=page.headers())).status == 200


async def test_another_sites_origin_is_refused(page: Page) -> None:
    with trio.fail_after(10):
        for origin in ["http://evil.example", "null", f"https://127.0.0.1:{page.port}"]:
            answer = await page.fetch(
                "/api/workspaces/0123456789abcdef/start",
                "POST",
                headers=[("cookie", page.cookie), ("origin", origin)],
            )
            assert answer.status == 403, origin
            assert b"other sites" in answer.body


async def test_a_host_naming_another_server_is_refused(page: Page) -> None:
    # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1.
    with trio.fail_after(10):
        for host in [f"evil.example:{page.port}", "127.0.0.1", f"127.0.0.1:{page.port + 1}"]:
            answer = await page.fetch("/api/workspaces", headers=page.headers(), host=host)
            assert answer.status == 403, host
            assert b"Host" in answer.body
        for host in [f"localhost:{page.port}", f"[::1]:{page.port}"]:
            answer = await page.fetch(
                "/api/workspaces", headers=page.headers(origin=False), host=host
            )
            assert answer.status == 200, host


async def test_websockets_need_the_cookie_and_the_pages_origin(page: Page) -> None:
    with trio.fail_after(10):
        for path in ["/ws/overview", "/ws/daemon/0123456789abcdef"]:
            for headers, status in [
                (page.headers(cookie=False), 401),
                ([("cookie", page.cookie), ("origin", "http://evil.example")], 403),
            ]:
                refused = await page.upgrade(path, headers)
                assert refused.status == status, (path, headers)
        async with page.websocket("/ws/overview") as ws:
            assert json.loads(await ws.get_message())["type"] == "workspaces"


async def test_static_files_are_only_the_static_folders(
    nursery: trio.Nursery, activated: Home, tmp_path: Path
) -> None:
    static = tmp_path / "static"
    (static / "sub").mkdir(parents=True)
    (static / "index.html").write_text("<p>page</p>")
    (static / "app.js").write_text("export {};")
    (static / "sub" / "icon.svg").write_text("<svg/>")
    (static / "notes.txt").write_text("licences")
    (static / "notes.py").write_text("not a kind it serves")
    (static / ".hidden.js").write_text("hidden")
    (tmp_path / "secret.js").write_text("outside")
    (static / "link.js").symlink_to(tmp_path / "secret.js")
    _server, gate = await serve(nursery, static)
    tab = Page(gate.url)
    with trio.fail_after(10):
        await tab.sign_in()
        js = await tab.fetch("/static/app.js", headers=tab.headers())
        assert (js.status, js.body) == (200, b"export {};")
        assert js.header("content-type") == "text/javascript; charset=utf-8"
        svg = await tab.fetch("/static/sub/icon.svg", headers=tab.headers())
        assert (svg.status, svg.header("content-type")) == (200, "image/svg+xml")
        text = await tab.fetch("/static/notes.txt", headers=tab.headers())
        assert (text.status, text.body) == (200, b"licences")
        assert text.header("content-type") == "text/plain; charset=utf-8"
        for target in [
            "/static/../secret.js",
            "/static/%2e%2e/secret.js",
            "/static/sub/..%2f..%2fsecret.js",
            "/static/sub%2f..%2f..%2fsecret.js",
            "/static/link.js",
            "/static/notes.py",
            "/static/.hidden.js",
            "/static//etc/passwd",
            "/static/sub\\..\\..\\secret.js",
        ]:
            answer = await tab.fetch(target, headers=tab.headers())
            assert answer.status in (400, 404), target
            assert b"outside" not in answer.body


async def test_a_head_or_body_over_its_limit_is_refused(page: Page) -> None:
    with trio.fail_after(10):
        big_head = await page.fetch(
            "/api/workspaces", headers=[*page.headers(), ("x-pad", "a" * 20000)]
        )
        assert big_head.status == 431
        big_body = await page.fetch(
            "/api/workspaces/0123456789abcdef/start", "POST", page.headers(), b"x" * 70000
        )
        assert big_body.status == 413
        assert (await page.fetch("/nothing", headers=page.headers())).status == 404


async def test_the_relay_carries_json_rpc_both_ways(daemon: DaemonProcess, page: Page) -> None:
    key = workspace_key(str(daemon.workspace.resolve()))
    with trio.fail_after(20):
        async with page.websocket(f"/ws/daemon/{key}") as ws:
            await initialize(ws)
            session = (await call(ws, "c", "session/create", {}))["session"]["id"]
            await call(ws, "a", "session/attach", {"sessionId": session})
            await call(ws, "t", "turn/start", {"sessionId": session, "text": "hello"})
            kinds: list[str] = []
            while "turn_completed" not in kinds:
                frame = json.loads(await ws.get_message())
                if frame.get("method") == "session/event":
                    kinds.append(frame["params"]["event"]["type"])
            assert "item_completed" in kinds


async def test_a_websocket_to_an_unknown_or_stopped_workspace_is_refused(
    page: Page, tmp_path: Path
) -> None:
    stopped = make_workspace(tmp_path / "stopped")
    await trio.to_thread.run_sync(remember, stopped)
    with trio.fail_after(10):
        for path, status in [
            ("/ws/daemon/0123456789abcdef", 404),
            (f"/ws/daemon/{workspace_key(str(stopped))}", 409),
            ("/ws/elsewhere", 404),
        ]:
            assert (await page.upgrade(path)).status == status, path


async def read_to_the_end(ws: trio_websocket.WebSocketConnection) -> None:
    while True:
        await ws.get_message()


def workspaces_by_root(answer: JSON) -> dict[str, JSON]:
    return {w["root"]: w for w in answer["workspaces"]}


async def test_the_workspaces_are_the_running_daemons_and_the_recent_ones(
    home: Home, daemon: DaemonProcess, tmp_path: Path, nursery: trio.Nursery
) -> None:
    other = start_daemon(home, make_workspace(tmp_path / "other"), "--idle-timeout", "0")
    try:
        stopped = make_workspace(tmp_path / "stopped")
        gone = make_workspace(tmp_path / "gone")
        with home.activated():
            # Each daemon puts its root in the recent list once it serves.
            wait_until(lambda: len(_recent_roots()) >= 2, "both daemons in the recent list")
            assert set(_recent_roots()) == {
                str(daemon.workspace.resolve()),
                str(other.workspace.resolve()),
            }
            remember(gone)
            remember(stopped)
            gone.rename(tmp_path / "moved")
            with other.client() as client:
                create_session(client)
            _server, gate = await serve(nursery)
            tab = Page(gate.url)
            with trio.fail_after(10):
                await tab.sign_in()
                answer = await tab.fetch("/api/workspaces", headers=tab.headers())
        assert answer.status == 200
        assert answer.header("content-type") == "application/json"
        # The daemons' tokens stay in the server.
        assert daemon.token.encode() not in answer.body
        assert other.token.encode() not in answer.body
        listed = json.loads(answer.body)["workspaces"]
        assert next(w["root"] for w in listed) == str(stopped)  # newest first
        by_root = {w["root"]: w for w in listed}
        assert set(by_root) == {
            str(daemon.workspace.resolve()),
            str(other.workspace.resolve()),
            str(stopped),
        }
        assert by_root[str(stopped)] == {
            "id": workspace_key(str(stopped)),
            "root": str(stopped),
            "name": "stopped",
            "running": False,
            "sessions": [],
        }
        mine = by_root[str(other.workspace.resolve())]
        assert mine["running"] is True
        assert mine["name"] == "other"
        assert len(mine["sessions"]) == 1, listed
        assert {"id", "createdAt", "updatedAt"} <= set(mine["sessions"][0])
    finally:
        other.stop()


def _recent_roots() -> list[str]:
    try:
        return json.loads(recent_workspaces_path().read_bytes())["roots"]
    except FileNotFoundError:
        return []


async def test_a_recent_workspace_is_started_from_the_page(
    page: Page, activated: Home, tmp_path: Path
) -> None:
    stopped = make_workspace(tmp_path / "stopped")
    remember(stopped)
    key = workspace_key(str(stopped))
    with trio.fail_after(30):
        async with page.websocket("/ws/overview") as overview:
            first = json.loads(await overview.get_message())
            assert [w["running"] for w in first["workspaces"]] == [False]
            answer = await page.fetch(f"/api/workspaces/{key}/start", "POST", page.headers())
            assert answer.status == 200
            assert json.loads(answer.body) == {"ok": True}
            info = activated.read_discovery(stopped)
            assert info is not None
            try:
                while True:
                    frame = json.loads(await overview.get_message())
                    if frame["workspaces"][0]["running"]:
                        break
                async with page.websocket(f"/ws/daemon/{key}") as ws:
                    await initialize(ws)
            finally:
                os.kill(info.pid, signal.SIGTERM)
        unknown = await page.fetch("/api/workspaces/0123456789abcdef/start", "POST", page.headers())
        assert unknown.status == 404
        assert json.loads(unknown.body) == {"ok": False, "error": "no such workspace"}


async def test_the_overview_pushes_a_new_session(daemon: DaemonProcess, page: Page) -> None:
    root = str(daemon.workspace.resolve())
    with trio.fail_after(20):
        async with page.websocket("/ws/overview") as overview:
            first = json.loads(await overview.get_message())
            assert first["type"] == "workspaces"
            before = {w["root"]: w for w in first["workspaces"]}[root]["sessions"]
            with daemon.client() as client:
                created = create_session(client)
            while True:
                frame = json.loads(await overview.get_message())
                sessions = {w["root"]: w for w in frame["workspaces"]}[root]["sessions"]
                if len(sessions) > len(before):
                    break
            assert created in [s["id"] for s in sessions]
            assert daemon.token not in json.dumps(frame)


async def test_closing_the_page_closes_its_daemon_connection(
    daemon: DaemonProcess, page: Page
) -> None:
    key = workspace_key(str(daemon.workspace.resolve()))
    with daemon.client() as client:
        session = create_session(client)

        def clients() -> int:
            listed = client.call(SESSION_LIST).sessions
            return next(s.clients for s in listed if s.id == session)

        with trio.fail_after(20):
            async with page.websocket(f"/ws/daemon/{key}") as ws:
                await initialize(ws)
                await call(ws, "a", "session/attach", {"sessionId": session})
                assert clients() == 1
            await trio.to_thread.run_sync(
                lambda: wait_until(lambda: clients() == 0, "the relay's connection closed")
            )


@pytest.mark.parametrize("how", ["stopped", "killed"])
async def test_a_daemon_that_goes_away_closes_the_page_saying_why(
    daemon: DaemonProcess, page: Page, how: str
) -> None:
    key = workspace_key(str(daemon.workspace.resolve()))
    with trio.fail_after(20):
        async with page.websocket(f"/ws/daemon/{key}") as ws:
            await initialize(ws)
            if how == "killed":
                daemon.kill()
            else:
                daemon.proc.send_signal(signal.SIGTERM)
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await read_to_the_end(ws)
    reason = closed.value.reason
    assert reason is not None
    if how == "killed":
        assert (reason.code, reason.reason) == (1011, LOST_DAEMON)
    else:
        # The daemon's own close frame, passed through as it was sent.
        assert reason.code == 1001
        assert reason.reason


def test_a_host_other_than_loopback_needs_tls(home: Home) -> None:
    done = cli(home, "web", "--host", "192.0.2.7")
    assert done.returncode == 2
    assert "--certfile" in done.stderr
    assert "not a loopback address" in done.stderr
    assert done.stdout == ""
    everywhere = cli(home, "web", "--host", "0.0.0.0", "--certfile", "c.pem", "--keyfile", "k.pem")
    assert everywhere.returncode == 2
    assert "every address" in everywhere.stderr
    half = cli(home, "web", "--certfile", "c.pem")
    assert (half.returncode, half.stderr.strip()) == (
        2,
        "tether: --certfile and --keyfile go together",
    )
    assert "is not a port" in cli(home, "web", "--port", "70000").stderr
    missing = cli(home, "web", "--certfile", "nope.pem", "--keyfile", "nope.key")
    assert missing.returncode == 2
    assert "cannot use the certificate or key" in missing.stderr


def test_a_busy_port_is_named_with_the_way_out(home: Home) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(home, "web", "--port", str(port))
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert "--port" in done.stderr
    assert done.stdout == ""


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, and its key, made here."""
    import datetime
    import ipaddress

    crypto = pytest.importorskip("cryptography", reason="cryptography makes the test's certificate")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_tls_serves_https_and_wss(
    nursery: trio.Nursery, daemon: DaemonProcess, activated: Home, tmp_path: Path
) -> None:
    import ssl

    cert, key = _self_signed(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    _server, gate = await serve(nursery, ssl_context=server_context)
    assert gate.url.startswith("https://127.0.0.1:")
    client_context = ssl.create_default_context(cafile=str(cert))
    tab = Page(gate.url, client_context)
    with trio.fail_after(10):
        answer = await tab.sign_in()
        assert answer.status == 303
        assert "; Secure" in (answer.header("set-cookie") or "")
        assert (await tab.fetch("/", headers=tab.headers())).status == 200
        async with tab.websocket("/ws/overview") as ws:
            assert json.loads(await ws.get_message())["type"] == "workspaces"
        key = workspace_key(str(daemon.workspace.resolve()))
        async with tab.websocket(f"/ws/daemon/{key}") as ws:
            await initialize(ws)
            assert (await call(ws, "l", "session/list", {}))["sessions"] == []
        # Plain http to the https port gets nowhere.
        plain = Page(gate.url.replace("https:", "http:"))
        with pytest.raises(h11.RemoteProtocolError):
            await plain.sign_in()


async def test_the_overview_holds_daemon_connections_only_while_a_page_watches(
    daemon: DaemonProcess, page: Page
) -> None:
    with daemon.client() as client:

        def connections() -> int:
            return client.call(DAEMON_STATUS).clients

        async def wait_for(count: int, what: str) -> None:
            await trio.to_thread.run_sync(lambda: wait_until(lambda: connections() == count, what))

        with trio.fail_after(20):
            listed = await page.fetch("/api/workspaces", headers=page.headers())
            assert listed.status == 200
            await wait_for(1, "the one look's connection closed")
            async with page.websocket("/ws/overview") as overview:
                await overview.get_message()
                await wait_for(2, "the overview's connection")
            await wait_for(1, "the overview's connection closed with its last page")


async def test_the_overview_pushes_a_daemon_that_stops(
    home: Home, daemon: DaemonProcess, page: Page
) -> None:
    root = str(daemon.workspace.resolve())
    with trio.fail_after(20):
        async with page.websocket("/ws/overview") as overview:
            first = json.loads(await overview.get_message())
            assert {w["root"]: w for w in first["workspaces"]}[root]["running"] is True
            await trio.to_thread.run_sync(daemon.stop)
            while True:
                frame = json.loads(await overview.get_message())
                shown = {w["root"]: w for w in frame["workspaces"]}.get(root)
                if shown is not None and not shown["running"]:
                    break
            assert shown["sessions"] == []


async def test_connections_that_never_sign_in_cannot_lock_the_page_out(
    nursery: trio.Nursery, activated: Home
) -> None:
    server, gate = await serve(nursery, max_connections=8, max_pending=4)
    tab = Page(gate.url)
    idle = [await trio.open_tcp_stream("127.0.0.1", tab.port) for _ in range(12)]
    try:
        with trio.fail_after(10):
            assert (await tab.sign_in()).status == 303
            assert (await tab.fetch("/api/workspaces", headers=tab.headers())).status == 200
            # The oldest connection that never sent a request was dropped for the page's.
            assert await idle[0].receive_some() == b""
            assert server.connections <= 8
    finally:
        for stream in idle:
            await stream.aclose()


@contextlib.contextmanager
def web_command(home: Home, *args: str) -> Generator[str]:
    """`tether web ARGS` running; the URL it printed. Stopped with Ctrl-C after."""
    with subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", "web", *args],
        env=home.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            line = proc.stdout.readline()
            assert line.startswith("tether web: "), (line, proc.stderr.read())
            yield line.removeprefix("tether web: ").strip()
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=10)
        assert code == 0, proc.stderr.read()


def test_a_restart_on_the_same_port_keeps_the_browsers_signed_in(home: Home) -> None:
    port = free_port()

    async def sign_in(url: str) -> str:
        tab = Page(url)
        assert (await tab.sign_in()).status == 303
        return tab.cookie

    async def status_with(url: str, cookie: str) -> int:
        tab = Page(url)
        return (await tab.fetch("/api/workspaces", headers=[("cookie", cookie)])).status

    with web_command(home, "--port", str(port)) as first:
        cookie = trio.run(sign_in, first)
    kept = home.root / "state" / "tether" / f"web-{port}.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    with web_command(home, "--port", str(port)) as again:
        assert again == first
        assert trio.run(status_with, again, cookie) == 200
    with web_command(home, "--port", str(port), "--new-token") as renewed:
        assert renewed != first
        assert trio.run(status_with, renewed, cookie) == 401
        assert trio.run(status_with, renewed, trio.run(sign_in, renewed)) == 200


def test_the_command_prints_its_url_and_serves_it(home: Home) -> None:
    with web_command(home, "--port", "0") as url:
        assert url.startswith("http://127.0.0.1:")
        assert "?token=" in url

        async def visit() -> tuple[int, int]:
            tab = Page(url)
            signed = await tab.sign_in()
            listed = await tab.fetch("/api/workspaces", headers=tab.headers())
            return signed.status, listed.status

        assert trio.run(visit) == (303, 200)
    # --port 0 keeps no token for a next start.
    assert not list((home.root / "state").glob("tether/web-*.json"))
