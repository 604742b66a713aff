"""Fan-out: 20 clients attached to one session while a turn streams ~2,000 events.

The model streams one text answer in 2,000 chunks; each chunk becomes one `item_delta` event,
which the daemon sends to all 20 connections. Two runs in the same session:
- paced: the model server waits --pace-ms (default 3 ms) between chunks, like a fast model;
  this shows latency when the daemon keeps up;
- burst: no wait; this shows throughput and the latency of a backlog.

What is measured, honestly:
- The daemon does not timestamp events, so there is no "emitted at" time. All 20 clients are
  read by ONE thread of this process (a selector over 20 blocking websockets); each message
  is stamped with the time its socket was found readable, before it is parsed.
- "spread" = for each seq, the last client's receive time minus the first client's. It is
  what the slowest subscriber waits beyond the fastest one (daemon fan-out order and
  scheduling, plus this single reader serving 20 sockets in turn).
- "model send -> client": the scripted model server runs in this process too; its send time
  of each text chunk (taken just before the socket write) is matched to the n-th item_delta.
  That is the full path: HTTP/SSE into the daemon, parsing, emit, 20 outboxes, 20 websocket
  writes, and this reader. Same clock (time.perf_counter) on both ends.
- Everything shares 2 CPUs here: the daemon, the model server thread and the 20-client reader
  compete, so client-side time is part of the figures.

Usage: python bench/fanout.py [--clients N] [--chunks N] [--pace-ms MS]
"""

import selectors
import sys
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass

import msgspec

from _harness import (
    DaemonProc,
    StreamRun,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    percentile,
    ready_messages,
    row,
    running_daemon,
)
from tether.clients.core.rpc import Client
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    SESSION_ATTACH,
    SESSION_CREATE,
    SessionAttachParams,
    SessionCreateParams,
    TurnStartParams,
)
from tether.testing.handler import Handler

RECEIVE_TIMEOUT_S = 40.0


class _Event(msgspec.Struct):
    type: str = ""
    status: str = ""


class _Params(msgspec.Struct, rename="camel"):
    seq: int = 0
    first_seq: int | None = None
    """Set on merged deltas (a client that fell behind): they stand for `first_seq`..`seq`."""
    event: _Event | None = None


class _Frame(msgspec.Struct):
    id: str | None = None
    method: str | None = None
    params: _Params | None = None
    error: dict[str, object] | None = None


_frame = msgspec.json.Decoder(_Frame)


@contextmanager
def record_model_sends(stamps: list[float]) -> Generator[None, None, None]:
    """Record when the model server writes each SSE chunk that carries text content."""
    handler = Handler
    original: Callable[[Handler, bytes], None] = handler._write_chunk

    def write_chunk(self: Handler, data: bytes) -> None:
        if b'"content":"' in data and b'"content":""' not in data:
            stamps.append(time.perf_counter())
        original(self, data)

    handler._write_chunk = write_chunk
    try:
        yield
    finally:
        handler._write_chunk = original


@dataclass
class Received:
    times: list[dict[int, float]]
    """Per client: seq -> receive time."""
    types: dict[int, str]
    resyncs: int
    duration_s: float


def receive_turn(clients: list[Client], start_turn: Callable[[], None]) -> Received:
    """Start the turn, then read all clients from this thread until each saw turn_completed."""
    times: list[dict[int, float]] = [{} for _ in clients]
    types: dict[int, str] = {}
    finished = [False] * len(clients)
    resyncs = 0
    selector = selectors.DefaultSelector()
    for index, client in enumerate(clients):
        selector.register(client.ws.fileno(), selectors.EVENT_READ, index)
    try:
        begin = time.perf_counter()
        start_turn()
        deadline = begin + RECEIVE_TIMEOUT_S
        while not all(finished):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"timed out; finished clients: {sum(finished)}")
            for key, _ in selector.select(timeout=1.0):
                index: int = key.data
                ws = clients[index].ws
                stamp = time.perf_counter()
                messages = ready_messages(ws)
                for data in messages:
                    frame = _frame.decode(data)
                    if frame.error is not None:
                        raise RuntimeError(f"the daemon answered an error: {frame.error}")
                    if frame.method == "session/resync":
                        resyncs += 1
                        finished[index] = True  # dropped: it would have to re-attach
                    if frame.method != "session/event" or frame.params is None:
                        continue
                    seq = frame.params.seq
                    first = seq if frame.params.first_seq is None else frame.params.first_seq
                    event = frame.params.event
                    for covered in range(first, seq + 1):
                        times[index][covered] = stamp
                        if event is not None:
                            types.setdefault(covered, event.type)
                    if event is not None and event.type == "turn_completed":
                        finished[index] = True
        return Received(times, types, resyncs, time.perf_counter() - begin)
    finally:
        selector.close()


@dataclass(frozen=True)
class Figures:
    events: int
    deltas: int
    duration_s: float
    spread_ms: list[float]
    first_ms: list[float]
    last_ms: list[float]
    resyncs: int
    daemon_cpu_s: float
    bench_cpu_s: float


def analyse(
    received: Received, sends: list[float], daemon_cpu_s: float, bench_cpu_s: float
) -> Figures:
    seqs = sorted(received.types)
    spread: list[float] = []
    complete = [seq for seq in seqs if all(seq in t for t in received.times)]
    for seq in complete:
        stamps = [t[seq] for t in received.times]
        spread.append((max(stamps) - min(stamps)) * 1000)
    deltas = [seq for seq in complete if received.types[seq] == "item_delta"]
    first: list[float] = []
    last: list[float] = []
    if len(deltas) == len(sends):
        for seq, sent in zip(deltas, sends, strict=True):
            stamps = [t[seq] for t in received.times]
            first.append((min(stamps) - sent) * 1000)
            last.append((max(stamps) - sent) * 1000)
    return Figures(
        events=len(seqs),
        deltas=len(deltas),
        duration_s=received.duration_s,
        spread_ms=spread,
        first_ms=first,
        last_ms=last,
        resyncs=received.resyncs,
        daemon_cpu_s=daemon_cpu_s,
        bench_cpu_s=bench_cpu_s,
    )


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"median {median(values):6.2f}   p99 {percentile(values, 99):7.2f}"
        f"   max {max(values):7.2f} ms"
    )


def report(title: str, figures: Figures, clients: int, sends: int) -> None:
    print(f"  {title}")
    row("events per client / of them item_delta", f"{figures.events:,} / {figures.deltas:,}")
    rate = figures.events * clients / figures.duration_s
    row("turn/start -> last client done", f"{figures.duration_s:.2f} s", note=f"{rate:,.0f} msg/s")
    row(
        "CPU: daemon / this process (reader + model)",
        f"{figures.daemon_cpu_s:.2f} s / {figures.bench_cpu_s:.2f} s",
    )
    per_message = figures.daemon_cpu_s / (figures.events * clients) * 1e6
    row("daemon CPU per delivered message", f"{per_message:.0f} us")
    print(f"    spread, last - first of {clients} clients:        {quantiles(figures.spread_ms)}")
    if figures.first_ms:
        print(f"    model send -> FIRST client receives:  {quantiles(figures.first_ms)}")
        print(f"    model send -> LAST client receives:   {quantiles(figures.last_ms)}")
    else:
        print(
            f"    model send -> client: n/a ({sends} chunks sent, {figures.deltas} deltas"
            " seen by every client; cannot pair them)"
        )
    if figures.resyncs:
        print(f"    WARNING: {figures.resyncs} clients were dropped (told to resync)")


def connect_all(daemon: DaemonProc, count: int) -> list[Client]:
    clients: list[Client] = []
    try:
        for index in range(count):
            clients.append(daemon.client(f"bench-fanout-{index}"))
    except BaseException:
        for client in clients:
            client.close()
        raise
    return clients


def main() -> int:
    stream = StreamRun(__doc__)
    count, chunks, pace, script = stream.clients, stream.chunks, stream.pace, stream.script
    handle_sigterm()
    load = load_line()

    sends: list[float] = []
    results: list[tuple[str, Figures, int]] = []
    with (
        model_server(script(pace)) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
        record_model_sends(sends),
    ):
        clients = connect_all(daemon, count)
        try:
            controller = clients[0]
            session_id = controller.call(SESSION_CREATE, SessionCreateParams()).session.id
            for index, client in enumerate(clients):
                client.call(
                    SESSION_ATTACH,
                    SessionAttachParams(
                        session_id=session_id, role="controller" if index == 0 else "observer"
                    ),
                )

            def start() -> None:
                params = TurnStartParams(session_id=session_id, text="stream")
                controller.ws.send(request_frame("start", "turn/start", params))

            for title, delay in ((f"paced: {pace:g} ms between chunks", pace), ("burst", 0.0)):
                server.set_script(script(delay))
                sends.clear()
                daemon_cpu = daemon.cpu_s()
                bench_cpu = time.process_time()
                received = receive_turn(clients, start)
                figures = analyse(
                    received,
                    list(sends),
                    daemon.cpu_s() - daemon_cpu,
                    time.process_time() - bench_cpu,
                )
                results.append((title, figures, len(sends)))
        finally:
            for client in clients:
                client.close()

    print(f"fanout: {count} clients on one session, {chunks} streamed chunks per turn")
    print(f"  ({machine_line()}; at start: {load})")
    print("  one reader thread in this process serves all clients")
    for title, figures, sent in results:
        report(title, figures, count, sent)
    print(
        "  (burst: the model sends all chunks at once, so 'model send -> client' is the time\n"
        "   spent queued behind the backlog; the paced run is the latency figure)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
