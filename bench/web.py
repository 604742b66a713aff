"""`tether web`'s relay: 20 browser-like websockets on one session while the scripted model
streams a long answer, through the relay and, for comparison, straight to the daemon.

The daemon and `tether web` (the real command, `python -P -m tether.clients.cli.main web`) run
as subprocesses of an isolated home; this process is the model server and the 20 "browsers"
(blocking websockets carrying the page's cookie and Origin, read by one thread through a
selector, as bench/fanout.py reads its clients). Each run streams --chunks text chunks, one
`item_delta` event each:

- direct: 20 connections to the daemon itself, the daemon's own figures;
- relay: 20 connections to `/ws/daemon/<id>`, each relayed over a daemon connection of its
  own, plus one direct connection as the reference.

Figures:
- model send -> client: the model server's send time of each chunk to a client's receive time
  of its event (same clock), p50/p99 over every (event, client), paced and burst;
- added by the relay: per event and relayed client, its receive time minus the direct
  reference connection's receive time of the same event (paced run; the daemon writes the
  reference's copy in the same pass as the relay's, so this is the relay's hop and the reading
  of 21 sockets by one thread), p50/p99; target p99 <= 5 ms;
- events per second through the relay (burst: messages delivered to all 20 / duration);
- the relay process's RSS after the runs, and its peak; target <= 40 MB.

Usage: python bench/web.py [--chunks N] [--pace-ms MS] [--clients N]
"""

import subprocess
import sys
from collections.abc import Generator
from contextlib import ExitStack, contextmanager
from urllib.parse import urlsplit

from fanout import Figures, Received, analyse, quantiles, receive_turn, record_model_sends

from _harness import (
    StreamRun,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    percentile,
    proc_cpu_s,
    proc_status_kb,
    row,
    running_daemon,
    verdict,
)
from tether.clients.core.rpc import Client
from tether.clients.core.websocket import WebSocket
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    INITIALIZE,
    SESSION_ATTACH,
    SESSION_CREATE,
    InitializeParams,
    SessionAttachParams,
    SessionCreateParams,
    TurnStartParams,
)
from tether.protocol.workspace_files import workspace_key

ADDED_P99_TARGET_MS = 5.0
RSS_TARGET_MB = 40.0


@contextmanager
def web_server(env: dict[str, str]) -> Generator[tuple[subprocess.Popen[str], str]]:
    """`tether web --port 0` in `env`, and the URL it printed; stopped with Ctrl-C after."""
    with subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", "web", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("tether web: "):
                raise RuntimeError(f"tether web did not start: {line!r}")
            yield proc, line.removeprefix("tether web: ").strip()
        finally:
            proc.send_signal(2)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sign_in(url: str) -> tuple[str, int, str, str]:
    """Trade the URL's token for the cookie, as a browser's first load does: (host, port,
    cookie, origin)."""
    import http.client

    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", f"/?{parts.query}")
        answer = conn.getresponse()
        answer.read()
        cookie = (answer.getheader("set-cookie") or "").split(";")[0]
    finally:
        conn.close()
    if answer.status != 303 or not cookie:
        raise RuntimeError(f"sign-in failed: {answer.status}")
    return parts.hostname, parts.port, cookie, f"{parts.scheme}://{parts.netloc}"


def relayed_client(url: str, workspace: str, info: Client, name: str) -> Client:
    host, port, cookie, origin = sign_in(url)
    ws = WebSocket.connect(
        host,
        port,
        path=f"/ws/daemon/{workspace_key(workspace)}",
        headers={"Cookie": cookie, "Origin": origin},
    )
    client = Client(ws, info.info)
    client.call(INITIALIZE, InitializeParams(client_name=name))
    return client


def added_ms(received: Received, reference: int) -> tuple[list[float], list[float]]:
    """Per (event, relayed client): its receive time minus the reference client's; and per
    event, the largest of them."""
    added: list[float] = []
    worst: list[float] = []
    base = received.times[reference]
    for seq, at in base.items():
        if received.types.get(seq) != "item_delta":
            continue
        gaps = [
            (times[seq] - at) * 1000
            for index, times in enumerate(received.times)
            if index != reference and seq in times
        ]
        added += gaps
        if gaps:
            worst.append(max(gaps))
    return added, worst


def main() -> int:
    stream = StreamRun(__doc__)
    count, chunks, pace, script = stream.clients, stream.chunks, stream.pace, stream.script
    handle_sigterm()
    load = load_line()

    sends: list[float] = []
    results: list[tuple[str, Figures, Received]] = []
    with ExitStack() as stack:
        server = stack.enter_context(model_server(script(pace)))
        home = stack.enter_context(bench_home(server.base_url))
        daemon = stack.enter_context(running_daemon(home))
        stack.enter_context(record_model_sends(sends))
        web, url = stack.enter_context(web_server(home.env))
        root = str(home.workspace)
        controller = stack.enter_context(daemon.client("bench-web-controller"))
        session_id = controller.call(SESSION_CREATE, SessionCreateParams()).session.id
        rss_idle = proc_status_kb(web.pid, "VmRSS")

        def start() -> None:
            params = TurnStartParams(session_id=session_id, text="stream")
            controller.ws.send(request_frame("start", "turn/start", params))

        def attach_all(clients: list[Client]) -> None:
            for client in clients:
                stack.callback(client.close)
                client.call(
                    SESSION_ATTACH, SessionAttachParams(session_id=session_id, role="observer")
                )

        def run(title: str, clients: list[Client], delay: float) -> None:
            server.set_script(script(delay))
            sends.clear()
            received = receive_turn(clients, start)
            figures = analyse(received, list(sends), 0.0, 0.0)
            results.append((title, figures, received))

        direct = [daemon.client(f"bench-web-direct-{i}") for i in range(count)]
        attach_all(direct)
        run("direct, paced", direct, pace)
        run("direct, burst", direct, 0.0)
        for client in direct:
            client.close()
        relayed = [relayed_client(url, root, controller, f"tether web {i}") for i in range(count)]
        reference = daemon.client("bench-web-reference")
        attach_all([*relayed, reference])
        web_cpu = proc_cpu_s(web.pid)
        run("relay, paced", [*relayed, reference], pace)
        run("relay, burst", [*relayed, reference], 0.0)
        web_cpu = proc_cpu_s(web.pid) - web_cpu
        rss = proc_status_kb(web.pid, "VmRSS")
        peak = proc_status_kb(web.pid, "VmHWM")

    print(f"web relay: {count} browser connections on one session, {chunks} chunks per turn")
    print(f"  ({machine_line()}; at start: {load})")
    for title, figures, _received in results:
        print(f"  {title}: {figures.events:,} events per client in {figures.duration_s:.2f} s")
        print(f"    model send -> client:  {quantiles(figures.last_ms + figures.first_ms)}")
    paced = next(received for title, _f, received in results if title == "relay, paced")
    added, worst = added_ms(paced, len(paced.times) - 1)
    burst = next(f for title, f, _r in results if title == "relay, burst")
    rate = burst.events * count / burst.duration_s
    p99 = percentile(added, 99)
    print("  added by the relay (relayed client minus the direct reference, paced run):")
    print(f"    per event and client:  median {median(added):6.2f}   p99 {p99:7.2f} ms")
    worst_p99 = percentile(worst, 99)
    print(f"    per event, worst of {count}: median {median(worst):6.2f}   p99 {worst_p99:7.2f} ms")
    row(
        "p99 added latency",
        f"{p99:.2f} ms",
        f"<= {ADDED_P99_TARGET_MS:g} ms {verdict(p99, ADDED_P99_TARGET_MS)}",
    )
    row("events per second through the relay (burst, all clients)", f"{rate:,.0f}")
    row("relay CPU for both relay runs", f"{web_cpu:.2f} s")
    rss_mb = rss / 1024
    row(
        "relay RSS idle / after / peak",
        f"{rss_idle / 1024:.1f} / {rss_mb:.1f} / {peak / 1024:.1f} MB",
        f"<= {RSS_TARGET_MB:g} MB {verdict(peak / 1024, RSS_TARGET_MB)}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
