"""The daemon's memory after serving many sessions.

One connection creates sessions one after another; each gets one short turn (attach, a
message, a read_file call of a 16 KB file, an answer of 2,000 characters streamed in 100
deltas, detach), as a user working through many small tasks would. The daemon's RSS (VmRSS)
is read after startup and after every `--report-every` sessions, with `sessions_loaded` from
`daemon/status`: idle sessions beyond the few most recent are unloaded (the store keeps
everything), so memory stays flat instead of growing with every session served.

Target: <= 45 MB after 200 sessions.

Usage: python bench/session_memory.py [--sessions N] [--report-every N]
"""

import argparse
import sys
import time
from typing import Any

from _harness import (
    DaemonProc,
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    mb,
    model_server,
    row,
    running_daemon,
    verdict,
)
from tether.clients.core.rpc import Client
from tether.protocol.events import TurnCompleted
from tether.protocol.methods import (
    DAEMON_STATUS,
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_DETACH,
    TURN_START,
    SessionAttachParams,
    SessionCreateParams,
    SessionEventParams,
    SessionRef,
    TurnStartParams,
)

TARGET_MB = 45.0

NOTES = "".join(f"{i:>4}  a line of project notes that the agent reads\n" for i in range(320))
ANSWER = "The project greets people: src/app.py defines greet(name). " * 34

SCRIPT: dict[str, Any] = {
    "loop": True,
    "steps": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
        {"text": ANSWER, "chunks": 100},
    ],
}


def one_session(client: Client, index: int) -> None:
    session = client.call(SESSION_CREATE, SessionCreateParams()).session
    client.call(
        SESSION_ATTACH,
        SessionAttachParams(session_id=session.id, role="controller"),
    )
    client.call(
        TURN_START,
        TurnStartParams(session_id=session.id, text=f"task {index}: what does this project do?"),
    )
    while True:
        _, params = client.next_notification(timeout=30)
        if isinstance(params, SessionEventParams) and isinstance(params.event, TurnCompleted):
            if params.event.status != "completed":
                raise RuntimeError(f"turn {index} ended {params.event.status}")
            break
    client.call(SESSION_DETACH, SessionRef(session_id=session.id))


def loaded(client: Client) -> int:
    return client.call(DAEMON_STATUS).sessions_loaded


def measure(daemon: DaemonProc, sessions: int, every: int) -> list[tuple[int, int, int]]:
    """(sessions served, daemon RSS in KiB, sessions loaded) at each report."""
    readings: list[tuple[int, int, int]] = []
    with daemon.client("bench-memory") as client:
        readings.append((0, daemon.rss_kb(), loaded(client)))
        for index in range(1, sessions + 1):
            one_session(client, index)
            if index % every == 0 or index == sessions:
                readings.append((index, daemon.rss_kb(), loaded(client)))
    return readings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200, help="sessions (default 200)")
    parser.add_argument(
        "--report-every", type=int, default=50, help="read the RSS every N sessions (default 50)"
    )
    args = parser.parse_args()
    handle_sigterm()
    load = load_line()
    with model_server(SCRIPT) as server, bench_home(server.base_url) as home:
        (home.workspace / "notes.md").write_text(NOTES)
        with running_daemon(home) as daemon:
            start = time.perf_counter()
            readings = measure(daemon, args.sessions, args.report_every)
            wall = time.perf_counter() - start
            peak = daemon.peak_rss_kb()

    print(f"session_memory: {args.sessions} sessions, one short turn each")
    print(f"  ({machine_line()}; at start: {load})")
    for served, rss, count in readings:
        row(f"daemon RSS after {served} sessions ({count} loaded)", mb(rss))
    final = readings[-1][1] / 1024
    row(
        f"daemon RSS after {readings[-1][0]} sessions",
        f"{final:.1f} MB",
        f"<= {TARGET_MB:g} MB",
        verdict(final, TARGET_MB + 0.05),
    )
    row("daemon peak RSS (VmHWM)", mb(peak))
    row("wall time, all sessions", f"{wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
