"""How fast a running turn stops: `turn/cancel`, and SIGTERM to the daemon.

(a) Cancel: a turn streams a long answer (400 deltas, 10 ms apart); after its first 10 deltas
    the client sends `turn/cancel`. Timed from sending the request to receiving the turn's
    `turn_completed` (cancelled), for the client that cancelled and for a second attached one.
(b) SIGTERM: the same turn, one attached client that keeps reading; timed from the signal to
    the daemon's exit (the turn ends `interrupted`, persisted, and the client is closed).

Usage: python bench/stop_latency.py [--runs N]
"""

import argparse
import signal
import time
from contextlib import suppress

from _harness import (
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    median,
    model_server,
    ms,
    row,
    running_daemon,
    start_daemon,
    verdict,
)
from tests.support import (
    attach,
    collect_until_turn_end,
    create_session,
    deltas_at_least,
    numbered,
    read_events,
    start_turn,
)
from tether.clients.core.websocket import ConnectionClosed
from tether.protocol.methods import TURN_CANCEL, TurnCancelParams

STREAM = {"steps": [{"text": numbered(400), "chunks": 400, "chunk_delay_ms": 10}], "loop": True}
CANCEL_TARGET = 2.0
STOP_TARGET = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description="How fast a running turn stops.")
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    handle_sigterm()
    print(f"stop latency: {machine_line()}\n{load_line()}")
    with model_server(STREAM) as server, bench_home(server.base_url) as home:
        cancelled: list[float] = []
        observed: list[float] = []
        with running_daemon(home) as daemon:
            for _ in range(runs):
                with daemon.client("a") as a, daemon.client("b") as b:
                    session_id = create_session(a)
                    attach(a, session_id)
                    attach(b, session_id, role="observer")
                    start_turn(a, session_id, "write a lot")
                    read_events(a, session_id, deltas_at_least(10))
                    sent = time.monotonic()
                    a.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
                    collect_until_turn_end(a, session_id)
                    cancelled.append(time.monotonic() - sent)
                    collect_until_turn_end(b, session_id)
                    observed.append(time.monotonic() - sent)
        stops: list[float] = []
        for _ in range(runs):
            daemon = start_daemon(home)
            try:
                with daemon.client("a") as a:
                    session_id = create_session(a)
                    attach(a, session_id)
                    start_turn(a, session_id, "write a lot")
                    read_events(a, session_id, deltas_at_least(10))
                    sent = time.monotonic()
                    daemon.proc.send_signal(signal.SIGTERM)
                    with suppress(ConnectionClosed):
                        while True:
                            a.next_notification(timeout=STOP_TARGET * 2)
                    daemon.proc.wait(timeout=STOP_TARGET * 2)
                    stops.append(time.monotonic() - sent)
            finally:
                daemon.stop()
    print(f"\n(a) turn/cancel to turn_completed, median of {runs}")
    report("the client that cancelled", median(cancelled), CANCEL_TARGET)
    report("a second attached client", median(observed), CANCEL_TARGET)
    print(f"\n(b) SIGTERM mid-turn to the daemon's exit, median of {runs}")
    report("one attached client reading", median(stops), STOP_TARGET)


def report(label: str, seconds: float, target: float) -> None:
    row(label, ms(seconds), f"< {target:g} s", verdict(seconds, target))


if __name__ == "__main__":
    main()
