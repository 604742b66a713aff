"""Lagging clients: how often a client is told to resync while a fast model streams a long answer.

Each run is a new session with two clients attached, and a turn whose answer streams in 6,000
chunks with no wait between them (a fast model: each chunk becomes one `item_delta`):
- a continuous reader reads its socket as fast as this process can, from turn/start on;
- a paused client reads nothing until the reader is done (a phone that lost the link for a
  moment), then reads everything. Its socket's receive buffer is set to `--receive-buffer`
  bytes (default 4096; 0: the system's), as a slow link's small window would hold little:
  what it does not take waits in the daemon.

Reported over the runs: how many runs told each client `session/resync`, and how many frames
each received for the turn (fewer than the events when the daemon merged waiting deltas). Run
it on the daemon before and after a change to the client queues to compare.

Usage: python bench/lagging_client.py [--runs N] [--receive-buffer BYTES]
"""

import argparse
import os
import socket
import sys
import time

import msgspec

from _harness import (
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    ready_messages,
    row,
    running_daemon,
)
from tether.clients.core.rpc import Client
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_READ,
    SessionAttachParams,
    SessionCreateParams,
    SessionRef,
    TurnStartParams,
)

CHUNKS = 6000
READ_TIMEOUT_S = 60.0


class _Event(msgspec.Struct):
    type: str = ""


class _Params(msgspec.Struct, rename="camel"):
    seq: int = 0
    first_seq: int | None = None
    event: _Event | None = None


class _Frame(msgspec.Struct):
    method: str | None = None
    params: _Params | None = None


_frame = msgspec.json.Decoder(_Frame)


class Reading:
    """What one client received of the turn: frames, merged frames, a resync."""

    def __init__(self) -> None:
        self.frames = 0
        self.merged = 0
        self.resynced = False
        self.done = False

    def take(self, data: bytes) -> None:
        frame = _frame.decode(data)
        if frame.method == "session/resync":
            self.resynced = self.done = True
        elif frame.method == "session/event" and frame.params is not None:
            self.frames += 1
            self.merged += frame.params.first_seq is not None
            event = frame.params.event
            if event is not None and event.type == "turn_completed":
                self.done = True


def read_until_done(client: Client, reading: Reading) -> None:
    deadline = time.monotonic() + READ_TIMEOUT_S
    while not reading.done:
        if time.monotonic() > deadline:
            raise RuntimeError("the turn did not end in time")
        for data in ready_messages(client.ws) or [client.ws.recv(timeout=READ_TIMEOUT_S)]:
            reading.take(data)


def wait_idle(client: Client, session_id: str) -> None:
    deadline = time.monotonic() + READ_TIMEOUT_S
    while (
        client.call(SESSION_READ, SessionRef(session_id=session_id)).snapshot.session.status
        != "idle"
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the turn did not end in time")
        time.sleep(0.05)


def shrink_receive_buffer(client: Client, size: int) -> None:
    sock = socket.socket(fileno=os.dup(client.ws.fileno()))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    finally:
        sock.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--receive-buffer", type=int, default=4096)
    args = parser.parse_args()
    runs: int = args.runs
    receive_buffer: int = args.receive_buffer
    handle_sigterm()
    load = load_line()
    text = "".join(f"w{i % 10000:04d} " for i in range(CHUNKS))
    script = {"loop": True, "steps": [{"text": text, "chunks": CHUNKS}]}
    results: list[tuple[Reading, Reading]] = []
    with (
        model_server(script) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
        daemon.client("bench-reader") as reader,
        daemon.client("bench-paused") as paused,
    ):
        if receive_buffer:
            shrink_receive_buffer(paused, receive_buffer)
        for run in range(runs):
            session_id = reader.call(SESSION_CREATE, SessionCreateParams()).session.id
            for client in (reader, paused):
                client.call(SESSION_ATTACH, SessionAttachParams(session_id=session_id))
            params = TurnStartParams(session_id=session_id, text="stream")
            reader.ws.send(request_frame(f"start{run}", "turn/start", params))
            continuous, late = Reading(), Reading()
            read_until_done(reader, continuous)
            read_until_done(paused, late)
            wait_idle(reader, session_id)
            results.append((continuous, late))

    print(f"lagging_client: {runs} runs, one turn each streaming {CHUNKS:,} chunks at once")
    print(f"  ({machine_line()}; at start: {load})")
    print(f"  the paused client's receive buffer: {receive_buffer or 'the system default'}")
    for name, index in (("continuous reader", 0), ("paused client", 1)):
        readings = [r[index] for r in results]
        resynced = sum(r.resynced for r in readings)
        frames = [float(r.frames) for r in readings if not r.resynced]
        merged = [float(r.merged) for r in readings if not r.resynced]
        row(f"{name}: runs told to resync", f"{resynced} of {runs}")
        if frames:
            row(
                f"{name}: frames for the turn (median)",
                f"{median(frames):,.0f}",
                note=f"{median(merged):,.0f} of them merged deltas",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
