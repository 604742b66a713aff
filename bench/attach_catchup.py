"""How fast a client catches up with a long session (>= 10,000 events).

Build: one turn whose script makes 50 steps of 100 read_file calls each (every call is an
item_started and an item_completed event), then answers; about 10,000 events, all persisted
except one text delta.

(a) Replay, same epoch: a fresh connection attaches with `after={seq: 0}`; the daemon replays
    every event from its in-memory ring. Timed from sending `session/attach` to receiving the
    event with the session's last seq. Measured with a raw websocket that only reads each
    frame's `seq` (the wire plus the daemon), and with the typed `tether.clients.core.rpc.Client`
    that decodes every event into protocol structs (what a Python client pays in addition).
(b) Snapshot, new epoch: the daemon is restarted (SIGTERM, start again), then a connection
    attaches without a cursor and gets a snapshot. Timed from sending `session/attach` to
    receiving the whole response frame: "cold" is the first attach after the restart (the
    daemon loads and replays the session from SQLite first), "warm" a second attach by
    another connection. Also the size of that response frame and the typed decode time.

Usage: python bench/attach_catchup.py [--repeats N]
"""

import argparse
import dataclasses
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from _harness import (
    BenchHome,
    DaemonProc,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    mb,
    median,
    model_server,
    ms,
    row,
    running_daemon,
    start_daemon,
    verdict,
)
from tether.clients.core.websocket import WebSocket
from tether.protocol import codec
from tether.protocol.events import TurnCompleted
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_READ,
    TURN_START,
    InitializeParams,
    SessionAttachParams,
    SessionAttachResult,
    SessionCreateParams,
    SessionEventParams,
    SessionRef,
    TurnStartParams,
)
from tether.protocol.session import Cursor

TARGET_S = 0.5
MIN_EVENTS = 10_000
TOOL_STEPS = 50
CALLS_PER_STEP = 100

SCRIPT: dict[str, Any] = {
    "steps": [
        *(
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "x.txt"}}] * CALLS_PER_STEP}
            for _ in range(TOOL_STEPS)
        ),
        {"text": "done"},
    ]
}


class _Params(msgspec.Struct):
    seq: int = 0


class _Frame(msgspec.Struct):
    """Just enough of a JSON-RPC frame to route it and read an event's seq."""

    id: str | None = None
    method: str | None = None
    params: _Params | None = None
    result: msgspec.Raw = msgspec.Raw(b"")
    error: dict[str, Any] | None = None


_frame = msgspec.json.Decoder(_Frame)


def raw_call(ws: WebSocket, request_id: str, method: str, params: msgspec.Struct) -> bytes:
    """Send a request and return its response frame, skipping anything before it."""
    ws.send(request_frame(request_id, method, params))
    while True:
        data = ws.recv(timeout=30)
        frame = _frame.decode(data)
        if frame.id == request_id:
            if frame.error is not None:
                raise RuntimeError(f"{method} failed: {frame.error}")
            return data


def initialized_raw(daemon: DaemonProc) -> WebSocket:
    ws = daemon.raw()
    raw_call(ws, "init", "initialize", InitializeParams(client_name="bench-raw"))
    return ws


def build_session(daemon: DaemonProc) -> tuple[str, float]:
    """Run the long turn; return the session id and how long the turn took."""
    with daemon.client("bench-builder") as client:
        session = client.call(SESSION_CREATE, SessionCreateParams()).session
        client.call(
            SESSION_ATTACH,
            SessionAttachParams(session_id=session.id, role="controller"),
        )
        start = time.perf_counter()
        client.call(TURN_START, TurnStartParams(session_id=session.id, text="go"))
        while True:
            method, params = client.next_notification(timeout=45)
            if method == "session/resync":
                continue  # the builder does not need every event
            if isinstance(params, SessionEventParams) and isinstance(params.event, TurnCompleted):
                if params.event.status != "completed":
                    raise RuntimeError(f"the build turn ended {params.event.status}")
                return session.id, time.perf_counter() - start


def session_seq(daemon: DaemonProc, session_id: str) -> int:
    with daemon.client("bench-read") as client:
        result = client.call(SESSION_READ, SessionRef(session_id=session_id))
        return result.snapshot.seq


@dataclass(frozen=True)
class Replay:
    seconds: float
    frames: int
    bytes: int
    mode: str
    daemon_cpu_s: float = 0.0
    client_cpu_s: float = 0.0


def with_cpu(daemon: DaemonProc, measure: Callable[[], Replay]) -> Replay:
    """Run a replay measurement and add the CPU time the daemon and this process spent."""
    daemon_cpu = daemon.cpu_s()
    client_cpu = time.process_time()
    replay = measure()
    return dataclasses.replace(
        replay,
        daemon_cpu_s=daemon.cpu_s() - daemon_cpu,
        client_cpu_s=time.process_time() - client_cpu,
    )


def replay_raw(daemon: DaemonProc, session_id: str, last_seq: int) -> Replay:
    with initialized_raw(daemon) as ws:
        params = SessionAttachParams(session_id=session_id, after=Cursor(seq=0), role="observer")
        start = time.perf_counter()
        ws.send(request_frame("attach", "session/attach", params))
        mode = ""
        frames = 0
        size = 0
        while True:
            data = ws.recv(timeout=30)
            frame = _frame.decode(data)
            if frame.id == "attach":
                if frame.error is not None:
                    raise RuntimeError(f"attach failed: {frame.error}")
                result = codec.decode_as(SessionAttachResult, frame.result)
                mode = result.mode
                if mode != "replay":
                    return Replay(time.perf_counter() - start, 0, len(data), mode)
                continue
            if frame.method == "session/event" and frame.params is not None:
                frames += 1
                size += len(data)
                if frame.params.seq >= last_seq:
                    return Replay(time.perf_counter() - start, frames, size, mode)


def replay_typed(daemon: DaemonProc, session_id: str, last_seq: int) -> Replay:
    with daemon.client("bench-typed") as client:
        start = time.perf_counter()
        result = client.call(
            SESSION_ATTACH,
            SessionAttachParams(session_id=session_id, after=Cursor(seq=0), role="observer"),
        )
        if result.mode != "replay":
            return Replay(time.perf_counter() - start, 0, 0, result.mode)
        frames = 0
        while True:
            method, params = client.next_notification(timeout=30)
            if isinstance(params, SessionEventParams):
                frames += 1
                if params.seq >= last_seq:
                    return Replay(time.perf_counter() - start, frames, 0, result.mode)
            elif method == "session/resync":
                raise RuntimeError("the replaying client was told to resync")


@dataclass(frozen=True)
class Snapshot:
    seconds: float
    bytes: int
    decode_s: float
    mode: str
    seq: int


def attach_snapshot(daemon: DaemonProc, session_id: str) -> Snapshot:
    with initialized_raw(daemon) as ws:
        params = SessionAttachParams(session_id=session_id, role="observer")
        start = time.perf_counter()
        data = raw_call(ws, "attach", "session/attach", params)
        seconds = time.perf_counter() - start
    begin = time.perf_counter()
    result = codec.decode_as(SessionAttachResult, _frame.decode(data).result)
    decode_s = time.perf_counter() - begin
    seq = result.snapshot.seq if result.snapshot is not None else -1
    return Snapshot(seconds, len(data), decode_s, result.mode, seq)


def persisted_events(home: BenchHome, session_id: str) -> int:
    with sqlite3.connect(f"file:{home.database_path(home.workspace)}?mode=ro", uri=True) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()
    return int(count)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="replays of each kind (default 3)")
    args = parser.parse_args()
    repeats: int = args.repeats
    handle_sigterm()
    load = load_line()

    with model_server(SCRIPT) as server, bench_home(server.base_url) as home:
        # This measures catching up, not compaction: a window large enough that the 5,000
        # tool results of the build turn are never summarised (which would use up script steps).
        config = home.root / "config" / "tether" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("[provider]\ncontext_window = 100000000\n")
        with running_daemon(home) as daemon:
            session_id, build_s = build_session(daemon)
            last_seq = session_seq(daemon, session_id)
            if last_seq < MIN_EVENTS:
                raise RuntimeError(f"only {last_seq} events; expected >= {MIN_EVENTS}")
            rss_built = daemon.rss_kb()
            raw = [
                with_cpu(daemon, lambda: replay_raw(daemon, session_id, last_seq))
                for _ in range(repeats)
            ]
            typed = [
                with_cpu(daemon, lambda: replay_typed(daemon, session_id, last_seq))
                for _ in range(repeats)
            ]
        # The daemon is stopped: its store has written everything.
        persisted = persisted_events(home, session_id)
        daemon = start_daemon(home)
        try:
            cold = attach_snapshot(daemon, session_id)
            warm = [attach_snapshot(daemon, session_id) for _ in range(repeats)]
            rss_restarted = daemon.rss_kb()
        finally:
            daemon.stop()

    for replay in (*raw, *typed):
        if replay.mode != "replay":
            raise RuntimeError(f"attach with after={{seq: 0}} got a {replay.mode}, not a replay")
    if cold.mode != "snapshot" or cold.seq != last_seq:
        raise RuntimeError(f"expected a snapshot at seq {last_seq}, got {cold}")

    raw_s = median([r.seconds for r in raw])
    typed_s = median([r.seconds for r in typed])
    warm_s = median([w.seconds for w in warm])
    print("attach_catchup: one long session")
    print(f"  ({machine_line()}; at start: {load})")
    row("events in the session (snapshot seq)", f"{last_seq:,}")
    row("persisted events (SQLite rows)", f"{persisted:,}")
    row("build turn (50 steps x 100 read_file)", f"{build_s:.2f} s")
    row("daemon RSS after the build", mb(rss_built))
    print(f"  (a) replay from the ring, after={{seq: 0}}, same epoch (median of {repeats}):")
    row(
        "raw websocket: attach -> last event",
        ms(raw_s),
        f"< {TARGET_S * 1000:g} ms",
        verdict(raw_s, TARGET_S),
    )
    row("  min of the runs", ms(min(r.seconds for r in raw)))
    row("  frames / bytes replayed", f"{raw[0].frames:,} / {raw[0].bytes / 1e6:.2f} MB")
    row("  rate", f"{raw[0].frames / raw_s:,.0f} ev/s")
    row(
        "  CPU during it: daemon / this client",
        f"{median([r.daemon_cpu_s for r in raw]):.2f} s / "
        f"{median([r.client_cpu_s for r in raw]):.2f} s",
    )
    row(
        "typed rpc.Client: attach -> last event",
        ms(typed_s),
        f"< {TARGET_S * 1000:g} ms",
        verdict(typed_s, TARGET_S),
    )
    row("  min of the runs", ms(min(r.seconds for r in typed)))
    row(
        "  CPU during it: daemon / this client",
        f"{median([r.daemon_cpu_s for r in typed]):.2f} s / "
        f"{median([r.client_cpu_s for r in typed]):.2f} s",
    )
    print("  (b) snapshot after a daemon restart (new epoch), attach without a cursor:")
    row(
        "cold (first attach: load from SQLite)",
        ms(cold.seconds),
        f"< {TARGET_S * 1000:g} ms",
        verdict(cold.seconds, TARGET_S),
    )
    row(
        f"warm (session loaded; median of {repeats})",
        ms(warm_s),
        f"< {TARGET_S * 1000:g} ms",
        verdict(warm_s, TARGET_S),
    )
    row("attach response size (snapshot)", f"{cold.bytes / 1e6:.2f} MB")
    row("  client-side typed decode of it", ms(cold.decode_s))
    row("daemon RSS after restart + attaches", mb(rss_restarted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
