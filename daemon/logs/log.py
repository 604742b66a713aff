"""Writing the daemon's log: `get_logger(__name__).info("message", key=value, ...)`.

A line is one JSON object: `ts` (UTC, ISO 8601 with microseconds), `level`, `logger` (the
module, without `tether.daemon.`), `msg`, then `conn`, `session` and `turn` when the task
writing it works for a connection, a session or a turn (see `bind`), then the caller's fields.
A line written outside any of them (the daemon starting, the store thread) carries no ids.

Levels: `debug` < `info` < `warning` < `error`; a call below the threshold costs a comparison.
What is costly to build for a debug line is built only after `enabled(DEBUG)` says so.

Until `configure` is called (a daemon in a test's process), warnings and errors go to stderr
and the rest nowhere; `capture` collects the records a block writes, for tests.

Contextvars: trio copies the context into each task it starts, so an id bound at the top of
a task holds for that task and the tasks it starts, and no other.
"""

import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Generator
from contextvars import ContextVar
from typing import IO, Final

import msgspec

from tether.daemon.logs.file import LogFile
from tether.daemon.logs.scrub import Scrubber

DEBUG: Final = 10
INFO: Final = 20
WARNING: Final = 30
ERROR: Final = 40
LEVELS: Final = {"debug": DEBUG, "info": INFO, "warning": WARNING, "error": ERROR}
NAMES: Final = {number: name for name, number in LEVELS.items()}

BODY_CHARS = 4000
"""How much of a model request's or response's body a debug line keeps."""

connection_id: ContextVar[str | None] = ContextVar("connection_id", default=None)
session_id: ContextVar[str | None] = ContextVar("session_id", default=None)
turn_id: ContextVar[str | None] = ContextVar("turn_id", default=None)

_UNSET = object()


def bind(*, conn: object = _UNSET, session: object = _UNSET, turn: object = _UNSET) -> None:
    """Set the ids that the current task's lines (and those of the tasks it starts from now
    on) carry; None clears one. Call it at the top of the task that does the work."""
    if conn is not _UNSET:
        connection_id.set(None if conn is None else str(conn))
    if session is not _UNSET:
        session_id.set(None if session is None else str(session))
    if turn is not _UNSET:
        turn_id.set(None if turn is None else str(turn))


def clip(text: str, limit: int = BODY_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text):,} characters in all]"


def clip_bytes(data: bytes, limit: int = BODY_CHARS) -> str:
    """`data` (UTF-8) as text cut to `limit` characters, saying how long it was; only its
    head is decoded, so a body of megabytes (base64 images) costs no more than a short one."""
    if len(data) <= limit:
        return data.decode(errors="replace")
    head = data[: limit * 4].decode(errors="replace")[:limit]
    return f"{head}… [{len(data):,} bytes in all]"


class _Output:
    """Where lines go: the file, an echo, captures. One per process."""

    def __init__(self) -> None:
        self.threshold = WARNING
        self.file: LogFile | None = None
        self.configured = False
        self.echo: IO[str] | None = None
        """Where lines are echoed once configured; before, warnings go to `sys.stderr` as it
        is when they are written (a test's capture)."""
        self.scrubber = Scrubber()
        self.captures: list[list[dict[str, object]]] = []
        self.encoder = msgspec.json.Encoder(enc_hook=str)
        self.lock = threading.Lock()
        self.second = (-1, "")
        """The last whole second a line was written in, and its text (lines come many to a
        second); replaced whole, so a thread reads a consistent pair."""

    def timestamp(self, now: float) -> str:
        seconds = int(now)
        cached = self.second
        if cached[0] != seconds:
            cached = self.second = (
                seconds,
                time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)),
            )
        return f"{cached[1]}.{int((now - seconds) * 1_000_000):06d}Z"

    def emit(self, level: int, logger: str, msg: str, fields: dict[str, object]) -> None:
        record: dict[str, object] = {
            "ts": self.timestamp(time.time()),
            "level": NAMES[level],
            "logger": logger,
            "msg": msg,
        }
        if (conn := connection_id.get()) is not None:
            record["conn"] = conn
        if (session := session_id.get()) is not None:
            record["session"] = session
        if (turn := turn_id.get()) is not None:
            record["turn"] = turn
        for key, value in fields.items():
            record.setdefault(key, value)
        # Values of other types (paths, exceptions) are written as their str.
        line = self.scrubber.scrub(self.encoder.encode(record)) + b"\n"
        if self.file is not None:
            self.file.write(line)
        echo = self.echo if self.configured else sys.stderr
        if echo is not None:
            with contextlib.suppress(OSError, ValueError):
                echo.write(line.decode(errors="replace"))
                echo.flush()
        if self.captures:
            decoded = msgspec.json.decode(line)
            for captured in self.captures:
                captured.append(decoded)


_output = _Output()


class Logger:
    """The lines of one module. Each method takes a message (a fixed phrase: what happened)
    and the facts as keyword fields; never raises."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name.removeprefix("tether.daemon.")

    @staticmethod
    def enabled(level: int) -> bool:
        return level >= _output.threshold or bool(_output.captures)

    def debug(self, msg: str, **fields: object) -> None:
        self._line(DEBUG, msg, fields)

    def info(self, msg: str, **fields: object) -> None:
        self._line(INFO, msg, fields)

    def warning(self, msg: str, **fields: object) -> None:
        self._line(WARNING, msg, fields)

    def error(self, msg: str, **fields: object) -> None:
        self._line(ERROR, msg, fields)

    def _line(self, level: int, msg: str, fields: dict[str, object]) -> None:
        if self.enabled(level):
            _output.emit(level, self.name, msg, fields)

    def exception(self, msg: str, *, exc: BaseException | None = None, **fields: object) -> None:
        """An error line with `exc` (default: the exception being handled) and its traceback."""
        if exc is None:
            exc = sys.exc_info()[1]
        if exc is not None:
            fields["error"] = f"{type(exc).__name__}: {exc}"
            fields["traceback"] = "".join(traceback.format_exception(exc)).rstrip()
        self.error(msg, **fields)


def get_logger(name: str) -> Logger:
    return Logger(name)


def configure(file: LogFile | None, *, level: str, echo: IO[str] | None = None) -> None:
    """Send lines at or above `level` (a name of `LEVELS`) to `file`, and to `echo` too when
    given. Called once, when the daemon starts."""
    with _output.lock:
        _output.threshold = LEVELS[level]
        _output.file = file
        _output.echo = echo
        _output.configured = True


def add_secret(secret: str) -> None:
    """Mask `secret` in every line written from now on (see `tether.daemon.logs.scrub`)."""
    _output.scrubber.add(secret)


def close() -> None:
    """Close the file; later lines go nowhere but an echo."""
    with _output.lock:
        if _output.file is not None:
            _output.file.close()
            _output.file = None


def reset() -> None:
    """Close the file and go back to the state before `configure` (for tests)."""
    close()
    with _output.lock:
        _output.threshold = WARNING
        _output.echo = None
        _output.configured = False


@contextlib.contextmanager
def capture() -> Generator[list[dict[str, object]]]:
    """The records (as written, secrets masked) of every line, at any level, written while
    the block runs."""
    captured: list[dict[str, object]] = []
    _output.captures.append(captured)
    try:
        yield captured
    finally:
        _output.captures.remove(captured)
