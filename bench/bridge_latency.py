"""What `tether bridge` adds per message, against a websocket straight to the daemon.

(a) Round trips: `daemon/status` requests one at a time, sent on a websocket of our own, and
    sent as lines to a `tether bridge` subprocess (its answer read back from its stdout);
    interleaved in rounds, after a warm-up. The difference of the medians is what the bridge
    adds to a request and its answer (two hops: stdin to socket, socket to stdout).
(b) A stream: one turn of 2,000 deltas (the model answers at once), followed from `turn/start`
    to `turn_completed`, directly and through the bridge; the difference per event is the
    one-way cost of relaying a daemon frame.
The bridge's own CPU time per message is read from /proc: the figure a loaded machine moves
least.

Usage: python bench/bridge_latency.py [--requests N] [--rounds N]
"""

import argparse
import subprocess
import sys
import time
from collections.abc import Callable

import msgspec

from _harness import (
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    proc_cpu_s,
    row,
    running_daemon,
)
from tether.clients.core.websocket import WebSocket

TARGET_MS = 1.0
DELTAS = 2000
STREAM = {"steps": [{"text": "x" * DELTAS, "chunks": DELTAS}], "loop": True}


class Bridged:
    """A `tether bridge` subprocess, spoken to a line at a time."""

    def __init__(self, env: dict[str, str], workspace: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.clients.cli.main", "bridge", "-w", workspace],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout

    def send(self, frame: bytes) -> None:
        self.stdin.write(frame + b"\n")
        self.stdin.flush()

    def recv(self) -> bytes:
        return self.stdout.readline()

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=20)
        self.stdout.close()


def frame(request_id: int, method: str, params: object = None) -> bytes:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return msgspec.json.encode(message)


def round_trips(send: Callable[[bytes], None], recv: Callable[[], bytes], count: int) -> float:
    """Seconds per `daemon/status` round trip, `count` of them one after another."""
    request = frame(7, "daemon/status")
    began = time.perf_counter()
    for _ in range(count):
        send(request)
        recv()
    return (time.perf_counter() - began) / count


def stream(send: Callable[[bytes], None], recv: Callable[[], bytes], session_id: str) -> float:
    """Seconds from `turn/start` to the turn's `turn_completed`."""
    began = time.perf_counter()
    send(frame(9, "turn/start", {"sessionId": session_id, "text": "go"}))
    while b'"turn_completed"' not in recv():
        pass
    return time.perf_counter() - began


def prepare(send: Callable[[bytes], None], recv: Callable[[], bytes]) -> str:
    """Initialize, create a session and attach to it; the session's id."""
    send(frame(1, "initialize", {"clientName": "bench", "capabilities": {"itemDeltas": True}}))
    recv()
    send(frame(2, "session/create", {}))
    session_id: str = msgspec.json.decode(recv())["result"]["session"]["id"]
    send(frame(3, "session/attach", {"sessionId": session_id}))
    while b'"id":3' not in recv():
        pass
    return session_id


def main() -> None:
    parser = argparse.ArgumentParser(description="What tether bridge adds per message.")
    parser.add_argument("--requests", type=int, default=500, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    handle_sigterm()
    print(f"bridge latency: {machine_line()}\n{load_line()}")
    with (
        model_server(STREAM) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        ws = WebSocket.connect(
            "127.0.0.1", daemon.port, headers={"Authorization": f"Bearer {daemon.token}"}
        )
        bridge = Bridged(home.env, str(home.workspace))
        try:
            direct_session = prepare(ws.send, ws.recv)
            bridged_session = prepare(bridge.send, bridge.recv)
            round_trips(ws.send, ws.recv, 200)
            round_trips(bridge.send, bridge.recv, 200)
            stream(ws.send, ws.recv, direct_session)
            stream(bridge.send, bridge.recv, bridged_session)
            direct: list[float] = []
            bridged: list[float] = []
            direct_streams: list[float] = []
            bridged_streams: list[float] = []
            cpu_before = proc_cpu_s(bridge.proc.pid)
            for _ in range(args.rounds):
                direct.append(round_trips(ws.send, ws.recv, args.requests))
                bridged.append(round_trips(bridge.send, bridge.recv, args.requests))
                direct_streams.append(stream(ws.send, ws.recv, direct_session))
                bridged_streams.append(stream(bridge.send, bridge.recv, bridged_session))
            cpu = proc_cpu_s(bridge.proc.pid) - cpu_before
        finally:
            ws.close()
            bridge.close()
    # Each round: 2 x requests messages, and about DELTAS + 10 events of the turn.
    relayed = args.rounds * (2 * args.requests + DELTAS + 10)
    added = median(bridged) - median(direct)
    per_event = (median(bridged_streams) - median(direct_streams)) / DELTAS
    print(f"\n(a) daemon/status round trips, median of {args.rounds} rounds of {args.requests}")
    row("direct websocket", f"{median(direct) * 1e6:.0f} us")
    row("through tether bridge", f"{median(bridged) * 1e6:.0f} us")
    ok = "ok" if added * 1000 <= TARGET_MS else "MISSED"
    row("added per round trip", f"{added * 1e6:.0f} us", f"<= {TARGET_MS:g} ms", ok)
    print(f"\n(b) a turn of {DELTAS} deltas, turn/start to turn_completed, median")
    row("direct websocket", f"{median(direct_streams) * 1000:.1f} ms")
    row("through tether bridge", f"{median(bridged_streams) * 1000:.1f} ms")
    ok = "ok" if per_event * 1000 <= TARGET_MS else "MISSED"
    row("added per event", f"{per_event * 1e6:.1f} us", f"<= {TARGET_MS:g} ms", ok)
    print("\n(c) the bridge's own CPU")
    row("per message relayed", f"{cpu / relayed * 1e6:.1f} us")


if __name__ == "__main__":
    main()
