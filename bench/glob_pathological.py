"""Pathological glob patterns against a live daemon: does the daemon stay responsive?

The workspace holds a file 25 folders deep and files with 60-character names. A turn calls the
`glob` tool once with each pattern below while a second client calls `daemon/status` in a
loop; the figures are each call's time (the tool call's own `duration_seconds`) and the
slowest `daemon/status` answer meanwhile. Matched as one backtracking regex, the first pattern
took seconds and the second tens of seconds, holding the interpreter the whole time.

    python bench/glob_pathological.py [--runs N]

Target: every `daemon/status` answer under 50 ms; each pattern done in well under a second.
"""

import threading
import time
from typing import Any

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
    runs_argument,
    verdict,
)
from tests.support import attach, collect_until_turn_end, create_session, start_turn
from tether.clients.core.websocket import ConnectionClosed
from tether.protocol.events import ItemCompleted
from tether.protocol.items import ToolCall
from tether.protocol.methods import DAEMON_STATUS, Empty

PATTERNS = {
    "`**/` x10 + `*.py`, 25-level path": "**/" * 10 + "*.py",
    "`*a*a*a*a*a*a*a*ab`, 60-char names": "*a*a*a*a*a*a*a*ab",
}
STATUS_TARGET = 0.050
PATTERN_TARGET = 1.0


def script(pattern: str) -> dict[str, Any]:
    call = {"name": "glob", "arguments": {"pattern": pattern}}
    return {"steps": [{"tool_calls": [call]}, {"text": "done"}]}


def main() -> int:
    runs = runs_argument(__doc__, 3)
    handle_sigterm()
    print(f"glob_pathological: {machine_line()}\n{load_line()}")
    with model_server(script("*")) as server, bench_home(server.base_url) as home:
        deep = home.workspace.joinpath(*(f"d{i}" for i in range(25)))
        deep.mkdir(parents=True)
        (deep / "file.txt").write_text("x\n")
        for index in range(10):
            (home.workspace / ("a" * 59 + str(index))).write_text("x\n")
        with running_daemon(home) as daemon:
            server.set_script(script("*"))
            one_turn(daemon, "*")  # warm-up: the first turn's imports are not the pattern's
            for label, pattern in PATTERNS.items():
                took: list[float] = []
                worst: list[float] = []
                for _ in range(runs):
                    server.set_script(script(pattern))
                    began = time.perf_counter()
                    try:
                        tool_s, status_max = one_turn(daemon, pattern)
                    except ConnectionClosed as exc:
                        lost = time.perf_counter() - began
                        print(f"  {label}: the turn's client was dropped after {ms(lost)} ({exc})")
                        return 1
                    took.append(tool_s)
                    worst.append(status_max)
                row(
                    label,
                    ms(median(took)),
                    f"< {ms(PATTERN_TARGET)}",
                    verdict(median(took), PATTERN_TARGET),
                )
                row(
                    "  slowest daemon/status meanwhile",
                    ms(max(worst)),
                    f"< {ms(STATUS_TARGET)}",
                    verdict(max(worst), STATUS_TARGET),
                )
    return 0


def one_turn(daemon: Any, pattern: str) -> tuple[float, float]:
    """(the glob call's time, the slowest daemon/status answer while the turn ran)."""
    latencies: list[float] = []
    failures: list[str] = []
    done = threading.Event()

    def poll() -> None:
        with daemon.client("poller") as poller:
            while not done.is_set():
                sent = time.perf_counter()
                try:
                    poller.call(DAEMON_STATUS, Empty())
                except (ConnectionClosed, TimeoutError, OSError) as exc:
                    # A daemon that holds the interpreter misses its keepalive: counted as
                    # the time until the call failed.
                    latencies.append(time.perf_counter() - sent)
                    failures.append(type(exc).__name__)
                    return
                latencies.append(time.perf_counter() - sent)
                done.wait(0.005)

    poller = threading.Thread(target=poll)
    with daemon.client("bench") as client:
        session_id = create_session(client)
        attach(client, session_id)
        poller.start()
        try:
            start_turn(client, session_id, f"glob {pattern}")
            events = collect_until_turn_end(client, session_id, timeout=300)
        finally:
            done.set()
            poller.join()
    calls = [
        params.event.item
        for params in events
        if isinstance(params.event, ItemCompleted) and isinstance(params.event.item, ToolCall)
    ]
    assert [call.status for call in calls] == ["completed"], events
    if failures:
        print(f"    daemon/status failed ({failures[0]}) after {ms(max(latencies))}")
    return calls[0].duration_seconds, max(latencies, default=0.0)


if __name__ == "__main__":
    raise SystemExit(main())
