"""Load: one daemon, 20 sessions each running a 20-step turn, 20 clients attached to each (400
websockets), all at once.

Every session's turn is 19 steps that each stream text and then ask for one `read_file` (a
cheap read-only tool), then a final streamed answer. All 20 turns start together. Each client
checks that its seqs are gap-free from its attach point to `turn_completed` (merged deltas, which
a client that fell behind gets, count for `firstSeq`..`seq`), and hashes what it received:
every frame but the deltas byte for byte, and the text of each run of one item's deltas. Every
client of a session must end with the same hash (identical sequences, whatever was merged).

What is measured, honestly:
- fan-out latency: from the daemon's emit of an event to each client's receipt of it. The
  protocol carries no timestamps, so the daemon runs with the debug-only
  `TETHER_DEBUG_EMIT_LOG` (see `tether.daemon.sessions.emit_log`): it writes down when it
  began emitting each event; each client records when its socket was found readable with
  the event (before parsing it). Both read `time.perf_counter` (CLOCK_MONOTONIC, one clock
  for every process of the machine). That is encoding once, the ring, the store's queue, 20
  writes and the client's wake-up. Reported for each delivery and for the last of a
  session's clients per event; the goal (p99 <= 10 ms) is judged on each delivery.
- the whole path as well: every streamed chunk carries a unique tag, and the scripted model
  server (a thread of this process) records when it writes that chunk to the daemon's HTTP
  stream; to the client's receipt of the `item_delta` carrying the tag is the model's
  HTTP/SSE stream into the daemon, parsing and the turn loop on top of fan-out. "spread" is,
  per chunk, the last of its clients' receive time minus the first's.
- clients: split over --procs worker processes (default 4, 100 sockets each), each reading
  its sockets from one thread with a selector, so that one Python process reading 400
  sockets is not what the latency shows.
- daemon CPU per event: the daemon's user+system time (/proc/PID/stat) from the start of the
  turns until every client saw its `turn_completed`, divided by the events emitted (and by
  the messages delivered, events x clients).
- memory: the daemon's VmHWM (peak RSS) over the run, and VmRSS once every client has gone
  and `--idle-wait` seconds have passed.

The model paces its chunks --pace-ms (40) apart: 25 chunks a second on each of 20 sessions at
once, 500 events and 10,000 frames a second for the daemon. Everything shares the machine's
CPUs (2 here): the daemon, the model server thread and the client processes compete, so the
load average is printed; rerun on a quiet machine for the figures that count.

Half-open flood (`--half-open N`, a case of its own): the daemon's open-file limit is set to
--open-files (soft and hard, as `ulimit -n` does), then N connections are opened that never
send their websocket upgrade, and opened again whenever the daemon closes them. Reported:
`tether run` (a one-step turn) before and during the flood, median of --runs, and how many the
daemon closed (it keeps at most 64 waiting, oldest dropped first; each gets 10 s). Target:
`tether run` during the flood within 0.5 s of before.

Usage: python bench/load.py [--sessions N] [--clients N] [--steps N] [--chunks N]
                            [--pace-ms MS] [--procs N] [--small]
       python bench/load.py --half-open 1100 [--open-files 1024] [--runs 5]
"""

import argparse
import hashlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import os
import re
import resource
import selectors
import socket
import sys
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from _harness import (
    DaemonProc,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    mb,
    median,
    model_server,
    percentile,
    ready_messages,
    row,
    run_cli,
    running_daemon,
    verdict,
)
from tether.clients.core.rpc import Client
from tether.clients.core.websocket import WebSocket
from tether.daemon.sessions.emit_log import VARIABLE as EMIT_LOG_VARIABLE
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    DAEMON_STATUS,
    INITIALIZE,
    SESSION_ATTACH,
    SESSION_CREATE,
    DaemonStatusResult,
    InitializeParams,
    SessionAttachParams,
    SessionCreateParams,
    TurnStartParams,
)
from tether.testing.handler import Handler

if TYPE_CHECKING:
    from multiprocessing.connection import PipeConnection

RUN_TIMEOUT_S = 300.0
P99_TARGET_MS = 10.0
PEAK_RSS_TARGET_KB = 150 * 1024
IDLE_RSS_TARGET_KB = 80 * 1024

TAG = re.compile(rb"<(\d{3})\.(\d{3})\.(\d{3})>")
"""The tag of a streamed chunk: <session.step.chunk>."""
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit "


def user_system_s(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far (/proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def tag_key(session: int, step: int, chunk: int) -> int:
    return (session * 1000 + step) * 1000 + chunk


def chunk_text(session: int, step: int, chunk: int, size: int) -> str:
    tag = f"<{session:03d}.{step:03d}.{chunk:03d}>"
    return (tag + FILLER * (size // len(FILLER) + 1))[:size]


def turn_script(
    sessions: int, steps: int, chunks: int, size: int, pace_ms: float
) -> dict[str, object]:
    """Each session's requests take its own steps (`match` on the session's prompt tag)."""
    script: list[dict[str, object]] = []
    for s in range(sessions):
        for step in range(steps):
            text = "".join(chunk_text(s, step, c, size) for c in range(chunks))
            entry: dict[str, object] = {
                "match": prompt_tag(s),
                "text": text,
                "chunks": chunks,
                "chunk_delay_ms": pace_ms,
            }
            if step < steps - 1:
                entry["tool_calls"] = [{"name": "read_file", "arguments": {"path": "README.md"}}]
            script.append(entry)
    return {"steps": script}


def prompt_tag(session: int) -> str:
    return f"[load-session-{session:03d}]"


@contextmanager
def record_model_sends(sends: dict[int, float]) -> Generator[None, None, None]:
    """Record when the model server writes each SSE chunk that carries a tag."""
    original: Callable[[Handler, bytes], None] = Handler._write_chunk

    def write_chunk(self: Handler, data: bytes) -> None:
        match = TAG.search(data)
        if match is not None:
            sends[tag_key(*(int(g) for g in match.groups()))] = time.perf_counter()
        original(self, data)

    Handler._write_chunk = write_chunk
    try:
        yield
    finally:
        Handler._write_chunk = original


# --------------------------------------------------------------------------------------------
# Client worker processes


@dataclass(frozen=True)
class Seat:
    session_index: int
    session_id: str
    client_index: int

    @property
    def controller(self) -> bool:
        return self.client_index == 0


@dataclass
class Seen:
    """What one client saw of its session's turn."""

    session_index: int
    from_seq: int = 0
    first_seq: int | None = None
    last_seq: int = 0
    events: int = 0
    gaps: int = 0
    repeats: int = 0
    completed: bool = False
    resyncs: int = 0
    errors: list[str] = field(default_factory=list[str])
    digest: str = ""
    cpu_s: float = 0.0
    """The CPU time of the client's worker process while it read (shared by its clients)."""
    tags: list[tuple[int, float]] = field(default_factory=list[tuple[int, float]])
    """(tag key, receive time) of each tagged chunk received."""
    received: list[tuple[int, float]] = field(default_factory=list[tuple[int, float]])
    """(seq, receive time) of each event received."""


class _Event(msgspec.Struct, rename="camel"):
    type: str = ""
    item_id: str = ""
    delta: str = ""


class _Params(msgspec.Struct, rename="camel"):
    seq: int = 0
    first_seq: int | None = None
    """Set on merged deltas (a client that fell behind): they stand for `first_seq`..`seq`."""
    event: _Event | None = None


class _Frame(msgspec.Struct):
    id: str | int | None = None
    method: str | None = None
    params: _Params | None = None
    error: dict[str, object] | None = None


_frame = msgspec.json.Decoder(_Frame)


def worker(
    pipe: multiprocessing.connection.Connection, discovery: bytes, seats: list[Seat]
) -> None:
    """Connect and attach every seat, say "ready", wait for "go", start the turns of the
    controller seats, read every socket until each saw `turn_completed`, send back what each
    saw, then wait for "close" and close."""
    info = msgspec.json.decode(discovery, type=DiscoveryInfo)
    clients: list[Client] = []
    seen: list[Seen] = []
    try:
        for seat in seats:
            ws = WebSocket.connect(
                "127.0.0.1", info.port, headers={"Authorization": f"Bearer {info.token}"}
            )
            client = Client(ws, info)
            clients.append(client)
            client.call(INITIALIZE, InitializeParams(client_name=f"load-{seat.session_index}"))
            result = client.call(
                SESSION_ATTACH,
                SessionAttachParams(
                    session_id=seat.session_id,
                    role="controller" if seat.controller else "observer",
                ),
            )
            seen.append(Seen(seat.session_index, from_seq=result.from_seq))
        pipe.send("ready")
        if pipe.recv() != "go":
            return
        for seat, client in zip(seats, clients, strict=True):
            if seat.controller:
                params = TurnStartParams(
                    session_id=seat.session_id, text=f"{prompt_tag(seat.session_index)} go"
                )
                client.ws.send(request_frame("start", "turn/start", params))
        cpu = time.process_time()
        read_all(clients, seen)
        cpu = time.process_time() - cpu
        for record in seen:
            record.cpu_s = cpu / len(seen)
        pipe.send(seen)
        pipe.recv()
    finally:
        for client in clients:
            client.close()


def read_all(clients: list[Client], seen: list[Seen]) -> None:
    hashes = [hashlib.blake2b(digest_size=16) for _ in clients]
    delta_item: list[str | None] = [None for _ in clients]
    expected = [s.from_seq + 1 for s in seen]
    left = len(clients)
    selector = selectors.DefaultSelector()
    for index, client in enumerate(clients):
        selector.register(client.ws.fileno(), selectors.EVENT_READ, index)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out with {left} clients not done")
            for key, _ in selector.select(timeout=1.0):
                index: int = key.data
                ws = clients[index].ws
                stamp = time.perf_counter()
                messages = ready_messages(ws)
                record = seen[index]
                for data in messages:
                    frame = _frame.decode(data)
                    if frame.error is not None:
                        record.errors.append(str(frame.error))
                    if frame.method == "session/resync":
                        record.resyncs += 1
                    if frame.method != "session/event" or frame.params is None:
                        continue
                    seq = frame.params.seq
                    start = seq if frame.params.first_seq is None else frame.params.first_seq
                    if record.first_seq is None:
                        record.first_seq = start
                    if start < expected[index]:
                        record.repeats += 1
                    elif start > expected[index]:
                        record.gaps += 1
                    expected[index] = max(expected[index], seq + 1)
                    record.last_seq = seq
                    record.events += 1
                    record.received.append((seq, stamp))
                    event = frame.params.event
                    # What the client holds, whether or not its deltas came merged: every
                    # other frame as sent, the text of each run of one item's deltas.
                    if event is not None and event.type == "item_delta":
                        if delta_item[index] != event.item_id:
                            delta_item[index] = event.item_id
                            hashes[index].update(b"\0delta " + event.item_id.encode())
                        hashes[index].update(event.delta.encode())
                    else:
                        delta_item[index] = None
                        hashes[index].update(b"\0" + data)
                    if event is None:
                        continue
                    if event.type == "item_delta":
                        for match in TAG.finditer(data):
                            record.tags.append((tag_key(*(int(g) for g in match.groups())), stamp))
                    elif event.type == "turn_completed" and not record.completed:
                        record.completed = True
                        left -= 1
                if record.resyncs and not record.completed:
                    record.completed = True  # dropped: it would have to re-attach
                    left -= 1
    finally:
        selector.close()
    for record, digest in zip(seen, hashes, strict=True):
        record.digest = digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Analysis


@dataclass(frozen=True)
class Figures:
    delivery_ms: list[float]
    """Model send -> each client's receipt, for every tagged chunk and client."""
    last_ms: list[float]
    """Model send -> the last of the session's clients, per tagged chunk."""
    spread_ms: list[float]
    """Per tagged chunk: last client's receipt minus the first's."""
    emit_ms: list[float]
    """The daemon's emit -> each client's receipt, for every event and client."""
    emit_last_ms: list[float]
    """The daemon's emit -> the last of the session's clients, per event."""
    events: int
    delivered: int
    problems: list[str]
    seen: list[Seen]


def read_emit_log(path: Path) -> dict[tuple[str, int], float]:
    """(session id, seq) -> when the daemon began emitting it (`TETHER_DEBUG_EMIT_LOG`)."""
    emitted: dict[tuple[str, int], float] = {}
    if not path.exists():
        return emitted
    for line in path.read_text().splitlines():
        session_id, seq, at = line.split()
        emitted[(session_id, int(seq))] = float(at)
    return emitted


def emit_latencies(
    seen: list[Seen], ids: list[str], emitted: dict[tuple[str, int], float]
) -> tuple[list[float], list[float]]:
    each: list[float] = []
    last: dict[tuple[str, int], float] = {}
    for record in seen:
        session_id = ids[record.session_index]
        for seq, stamp in record.received:
            at = emitted.get((session_id, seq))
            if at is None:
                continue
            each.append((stamp - at) * 1000)
            key = (session_id, seq)
            last[key] = max(last.get(key, 0.0), (stamp - at) * 1000)
    return each, list(last.values())


def analyse(
    seen: list[Seen],
    sends: dict[int, float],
    clients: int,
    ids: list[str],
    emitted: dict[tuple[str, int], float],
) -> Figures:
    problems: list[str] = []
    by_session: dict[int, list[Seen]] = {}
    for record in seen:
        by_session.setdefault(record.session_index, []).append(record)
    events = 0
    delivered = 0
    for index, records in sorted(by_session.items()):
        if len(records) != clients:
            problems.append(f"session {index}: {len(records)} clients, expected {clients}")
        for record in records:
            delivered += record.events
            if not record.completed or record.resyncs:
                problems.append(
                    f"session {index}: a client ended without turn_completed"
                    f" (resyncs {record.resyncs})"
                )
            if record.gaps or record.repeats:
                problems.append(
                    f"session {index}: a client saw {record.gaps} gaps, {record.repeats} repeats"
                )
            if record.first_seq != record.from_seq + 1:
                problems.append(
                    f"session {index}: a client's first seq {record.first_seq}, attached"
                    f" at {record.from_seq}"
                )
            if record.errors:
                problems.append(f"session {index}: errors {record.errors[:3]}")
        if len({r.digest for r in records}) != 1 or len({r.last_seq for r in records}) != 1:
            problems.append(f"session {index}: its clients saw different sequences")
        events += max(r.last_seq - r.from_seq for r in records)
    received: dict[int, list[float]] = {}
    for record in seen:
        for key, stamp in record.tags:
            received.setdefault(key, []).append(stamp)
    delivery: list[float] = []
    last: list[float] = []
    spread: list[float] = []
    missing = 0
    for key, sent in sends.items():
        stamps = received.get(key, [])
        if len(stamps) != clients:
            missing += 1
            continue
        delivery.extend((stamp - sent) * 1000 for stamp in stamps)
        last.append((max(stamps) - sent) * 1000)
        spread.append((max(stamps) - min(stamps)) * 1000)
    if missing:
        problems.append(f"{missing} chunks sent by the model were not seen by every client")
    emit_each, emit_last = emit_latencies(seen, ids, emitted)
    if not emit_each:
        problems.append("the daemon's emit log is empty")
    return Figures(delivery, last, spread, emit_each, emit_last, events, delivered, problems, seen)


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"median {median(values):6.2f}   p99 {percentile(values, 99):7.2f}"
        f"   max {max(values):7.2f} ms"
    )


# --------------------------------------------------------------------------------------------
# Main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--clients", type=int, default=20, help="clients per session")
    parser.add_argument("--steps", type=int, default=20, help="model calls per turn")
    parser.add_argument("--chunks", type=int, default=20, help="streamed chunks per step")
    parser.add_argument("--chunk-chars", type=int, default=64, help="characters per chunk")
    parser.add_argument(
        "--pace-ms", type=float, default=40.0, help="the model's wait between chunks"
    )
    parser.add_argument("--procs", type=int, default=4, help="client worker processes")
    parser.add_argument(
        "--idle-wait", type=float, default=3.0, help="seconds after the run before idle RSS"
    )
    parser.add_argument(
        "--small", action="store_true", help="4 sessions x 5 clients x 5 steps (a quick check)"
    )
    parser.add_argument(
        "--half-open", type=int, default=0, help="run the half-open flood case with N connections"
    )
    parser.add_argument(
        "--open-files", type=int, default=1024, help="the daemon's open-file limit (half-open)"
    )
    parser.add_argument("--runs", type=int, default=5, help="`tether run`s each way (half-open)")
    args = parser.parse_args()
    if args.small:
        args.sessions, args.clients, args.steps, args.procs = 4, 5, 5, 2
    return args


def main() -> int:
    args = parse_args()
    handle_sigterm()
    if args.half_open:
        return half_open(args.half_open, args.open_files, args.runs)
    load = load_line()
    sessions: int = args.sessions
    per_session: int = args.clients
    script = turn_script(sessions, args.steps, args.chunks, args.chunk_chars, args.pace_ms)
    sends: dict[int, float] = {}
    context = multiprocessing.get_context("spawn")
    with (
        model_server(script) as server,
        bench_home(server.base_url) as home,
    ):
        emit_log = home.root / "emitted.txt"
        home.env[EMIT_LOG_VARIABLE] = str(emit_log)
        with running_daemon(home) as daemon, record_model_sends(sends):
            status, seen, measured = run(daemon, args, context)
        figures = analyse(seen, sends, per_session, measured.ids, read_emit_log(emit_log))
        requests = len(server.requests)
    report(args, status, figures, measured, requests, load)
    return 0 if not figures.problems else 1


@dataclass(frozen=True)
class Measured:
    ids: list[str]
    procs: int
    duration: float
    user: float
    system: float
    bench_cpu: float
    rss_attached: int
    rss_done: int
    peak: int
    idle: int


def run(
    daemon: DaemonProc, args: argparse.Namespace, context: multiprocessing.context.SpawnContext
) -> tuple[DaemonStatusResult, list[Seen], Measured]:
    """Create the sessions, attach every client, run the turns, and read the daemon's CPU and
    memory around them."""
    sessions: int = args.sessions
    per_session: int = args.clients
    control = daemon.client("load-control")
    try:
        ids = [
            control.call(SESSION_CREATE, SessionCreateParams()).session.id for _ in range(sessions)
        ]
    finally:
        control.close()
    seats = [Seat(s, ids[s], c) for s in range(sessions) for c in range(per_session)]
    procs = max(1, min(args.procs, len(seats)))
    shares = [seats[i::procs] for i in range(procs)]
    discovery = msgspec.json.encode(daemon.info)
    pipes: list[multiprocessing.connection.Connection | PipeConnection] = []
    workers: list[multiprocessing.process.BaseProcess] = []
    try:
        for share in shares:
            ours, theirs = context.Pipe()
            proc = context.Process(target=worker, args=(theirs, discovery, share))
            proc.start()
            pipes.append(ours)
            workers.append(proc)
        for pipe in pipes:
            if not pipe.poll(120) or pipe.recv() != "ready":
                raise RuntimeError("a client worker did not get ready")
        rss_attached = daemon.rss_kb()
        user_before, system_before = user_system_s(daemon.pid)
        bench_before = time.process_time()
        begin = time.perf_counter()
        for pipe in pipes:
            pipe.send("go")
        seen: list[Seen] = []
        for pipe in pipes:
            if not pipe.poll(RUN_TIMEOUT_S):
                raise RuntimeError("a client worker did not finish")
            seen.extend(pipe.recv())
        duration = time.perf_counter() - begin
        user_after, system_after = user_system_s(daemon.pid)
        user, system = user_after - user_before, system_after - system_before
        bench_cpu = time.process_time() - bench_before
        peak = daemon.peak_rss_kb()
        rss_done = daemon.rss_kb()
        for pipe in pipes:
            pipe.send("close")
        for proc in workers:
            proc.join(30)
    finally:
        for proc in workers:
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
    time.sleep(args.idle_wait)
    idle = daemon.rss_kb()
    status_client = daemon.client("load-status")
    try:
        status = status_client.call(DAEMON_STATUS)
    finally:
        status_client.close()
    measured = Measured(
        ids=ids,
        procs=procs,
        duration=duration,
        user=user,
        system=system,
        bench_cpu=bench_cpu,
        rss_attached=rss_attached,
        rss_done=rss_done,
        peak=peak,
        idle=idle,
    )
    return status, seen, measured


def report(
    args: argparse.Namespace,
    status: DaemonStatusResult,
    figures: Figures,
    measured: Measured,
    requests: int,
    load: str,
) -> None:
    sessions: int = args.sessions
    per_session: int = args.clients
    cpu = measured.user + measured.system
    connections = sessions * per_session
    print(
        f"load: {sessions} sessions x {per_session} clients = {connections} websockets;"
        f" {args.steps} steps per turn, {args.chunks} chunks of {args.chunk_chars} chars per"
        f" step, {args.pace_ms:g} ms between chunks"
    )
    print(f"  ({machine_line()}; at start: {load}; at end: {load_line()})")
    print(f"  clients in {measured.procs} worker processes; {requests} model requests")
    row("events emitted (all sessions)", f"{figures.events:,}")
    row(
        "messages delivered",
        f"{figures.delivered:,}",
        note=f"{measured.duration:.2f} s for all turns",
    )
    ok = not figures.problems
    row("identical, gap-free sequences on every client", "yes" if ok else "NO")
    for problem in figures.problems[:10]:
        print(f"    PROBLEM: {problem}")
    print("    fan-out: the daemon's emit -> client receipt, every event:")
    print(f"      each client:                      {quantiles(figures.emit_ms)}")
    print(f"      last of the session's clients:    {quantiles(figures.emit_last_ms)}")
    print("    the whole path: the model's send of a chunk -> client receipt of its delta:")
    print(f"      each client:                      {quantiles(figures.delivery_ms)}")
    print(f"      last of the session's clients:    {quantiles(figures.last_ms)}")
    print(f"      spread, last - first client:      {quantiles(figures.spread_ms)}")
    if figures.emit_ms:
        p99 = percentile(figures.emit_ms, 99)
        row(
            "fan-out p99 (emit -> client)",
            f"{p99:.2f} ms",
            f"<= {P99_TARGET_MS:g} ms",
            verdict(p99, P99_TARGET_MS + 1e-9),
        )
    row(
        "daemon CPU: user + system",
        f"{cpu:.2f} s",
        note=f"{measured.user:.2f} + {measured.system:.2f} s",
    )
    clients_cpu = sum(record.cpu_s for record in figures.seen)
    row(
        "CPU of the client processes / of the model server",
        f"{clients_cpu:.2f} / {measured.bench_cpu:.2f} s",
    )
    if figures.events:
        row("daemon CPU per event", f"{cpu / figures.events * 1e6:.0f} us")
    if figures.delivered:
        row("daemon CPU per delivered message", f"{cpu / figures.delivered * 1e6:.1f} us")
    row("daemon RSS, all attached before the turns", mb(measured.rss_attached))
    row("daemon RSS when the turns ended", mb(measured.rss_done))
    row(
        "daemon peak RSS (VmHWM)",
        mb(measured.peak),
        "<= 150 MB",
        verdict(measured.peak, PEAK_RSS_TARGET_KB + 1),
    )
    row(
        f"daemon RSS {args.idle_wait:g} s after every client left",
        mb(measured.idle),
        "<= 80 MB",
        verdict(measured.idle, IDLE_RSS_TARGET_KB + 1),
    )
    row("sessions loaded then", str(status.sessions_loaded))


HALF_OPEN_TARGET = 0.5
"""Seconds a half-open flood may add to `tether run`."""


def half_open(count: int, open_files: int, runs: int) -> int:
    """The half-open flood case (see the module's docstring)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:  # this process holds the flood's sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1024), hard))
    print(f"half-open flood: {count} connections, daemon limited to {open_files} open files")
    print(f"{machine_line()}\n{load_line()}")
    with (
        model_server({"steps": [{"text": "done"}], "loop": True}) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (open_files, open_files))

        def tether_run() -> float:
            done = run_cli(home, "run", "--workspace", str(home.workspace), "go", timeout=60)
            if done.returncode != 0:
                raise RuntimeError(f"tether run exited {done.returncode}: {done.stderr.strip()}")
            return done.wall_s

        tether_run()  # warm-up
        before = [tether_run() for _ in range(runs)]
        port = home.read_discovery(home.workspace)
        assert port is not None
        address = ("127.0.0.1", port.port)
        sockets = [socket.create_connection(address) for _ in range(count)]
        dropped = 0
        try:
            during: list[float] = []
            for _ in range(runs):
                # The flood is kept up: what the daemon closed is opened again before each run.
                for index, sock in enumerate(sockets):
                    if _closed(sock):
                        sock.close()
                        sockets[index] = socket.create_connection(address)
                        dropped += 1
                during.append(tether_run())
            dropped += sum(_closed(sock) for sock in sockets)
        finally:
            for sock in sockets:
                sock.close()
    added = median(during) - median(before)
    row("tether run, no flood (median)", f"{median(before):.2f} s")
    row(
        f"tether run, {count} half-open (median)",
        f"{median(during):.2f} s",
        f"+{HALF_OPEN_TARGET} s",
        verdict(added, HALF_OPEN_TARGET),
    )
    row("  worst during the flood", f"{max(during):.2f} s")
    row("half-open connections the daemon closed", f"{dropped} ({count} kept open)")
    return 0 if added <= HALF_OPEN_TARGET else 1


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


if __name__ == "__main__":
    sys.exit(main())
