"""A debug-only record of when each session event is emitted, for the benchmark that measures
fan-out latency (`bench/load.py`): with `TETHER_DEBUG_EMIT_LOG=PATH` in the daemon's
environment, `Session.emit` appends one line per event to PATH, `SESSION_ID SEQ SECONDS`, the
seconds from `time.perf_counter` (CLOCK_MONOTONIC: comparable with any process's on the same
machine) taken as `emit` begins. The file is buffered and closed at exit. Unset, which is
always the case outside that benchmark, it costs one test of None per event.
"""

import atexit
import os
from typing import TextIO

VARIABLE = "TETHER_DEBUG_EMIT_LOG"


def open_from_environment() -> TextIO | None:
    path = os.environ.get(VARIABLE)
    if not path:
        return None
    log = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115 - closed at exit
    atexit.register(log.close)
    return log
