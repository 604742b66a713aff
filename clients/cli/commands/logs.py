"""`tether daemon logs [-f] [--level L] [--session ID] [-n N] [--json]`: the workspace daemon's
log, read from its files (the daemon need not run).

The log is JSON lines in `daemon-KEY.log` and its rotated files `.log.1` (newest) to `.log.3`
(see docs/logs.md). Lines are read oldest first; `--level` keeps those at or above a level,
`--session` those of one session (an id or its prefix), `-n` the last N of what is kept.
Without `--json` each line is drawn as `time LEVEL ids logger: message key=value ...` (time in
local time, ids shortened); with it, the kept lines are printed as they are in the file.
`-f` prints the last lines (10 unless `-n` says) and then each new one, across rotations,
until Ctrl-C. A line that is not JSON (an older tether's log) is shown as it is, unless a
filter or `--json` asks for what it cannot say.
"""

import argparse
import itertools
import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, cast

import msgspec

from tether.clients.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.reader import reader_gone, silence_stdout
from tether.clients.cli.targets import workspace as target_workspace
from tether.protocol.places import log_path, stderr_path

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
KEPT_FILES = 3
"""Rotated files the daemon keeps (`tether.daemon.logs.file.KEEP`)."""
FOLLOW_LINES = 10
"""Lines `-f` shows before following, unless `-n` says otherwise."""
POLL_SECONDS = 0.2
HEAD = ("ts", "level", "logger", "msg", "conn", "session", "turn")
"""The fields every line begins with; the rest are the line's own."""

_decoder = msgspec.json.Decoder()


class Filter:
    """Which lines to keep: at or above `level`, of the session starting with `session`."""

    def __init__(self, level: str | None, session: str | None) -> None:
        self.level = LEVELS[level] if level else 0
        self.session = session

    @property
    def active(self) -> bool:
        return bool(self.level or self.session)

    def keeps(self, record: dict[str, object] | None) -> bool:
        if record is None:
            return not self.active
        if self.level and LEVELS.get(str(record.get("level")), 0) < self.level:
            return False
        if self.session:
            session = record.get("session")
            return isinstance(session, str) and session.startswith(self.session)
        return True


def decode(line: bytes) -> dict[str, object] | None:
    """The record of a line, or None for one that is not a JSON object."""
    try:
        value = _decoder.decode(line)
    except msgspec.DecodeError:
        return None
    return cast("dict[str, object]", value) if isinstance(value, dict) else None


def short_id(value: str) -> str:
    """`s_60d1fd0db7120d26` as `s_60d1fd0d`: enough to tell sessions apart in a screenful."""
    prefix, _, rest = value.partition("_")
    return f"{prefix}_{rest[:8]}" if rest else value


def local_time(ts: str) -> str:
    try:
        moment = datetime.fromisoformat(ts).astimezone()
    except ValueError:
        return ts
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def _value(value: object) -> str:
    if isinstance(value, str):
        if value and not any(c.isspace() or c in "\"'=" for c in value):
            return value
        return msgspec.json.encode(value).decode()
    return msgspec.json.encode(value).decode()


def render(record: dict[str, object]) -> str:
    """One record as a line to read (a multi-line field, a traceback, follows it indented)."""
    parts = [
        local_time(str(record.get("ts", ""))),
        f"{str(record.get('level', '?')).upper():<7}",
    ]
    for key in ("conn", "session", "turn"):
        value = record.get(key)
        if isinstance(value, str):
            parts.append(short_id(value))
    parts.append(f"{record.get('logger', '?')}: {record.get('msg', '')}")
    below: list[str] = []
    for key, value in record.items():
        if key in HEAD or value is None:
            continue
        if isinstance(value, str) and "\n" in value:
            below.append(f"  {key}:")
            below.extend(f"    {line}" for line in value.splitlines())
        else:
            parts.append(f"{key}={_value(value)}")
    return "\n".join([" ".join(parts), *below])


def rotated_files(current: Path) -> list[Path]:
    """The log's rotated files that exist, oldest first."""
    rotated = [current.with_name(f"{current.name}.{i}") for i in range(KEPT_FILES, 0, -1)]
    return [path for path in rotated if path.exists()]


def read_lines(paths: Iterable[Path]) -> Iterator[bytes]:
    for path in paths:
        try:
            with path.open("rb") as handle:
                for line in handle:
                    if line.strip():
                        yield line.rstrip(b"\r\n")
        except FileNotFoundError:
            continue  # rotated away while being read


class Follower:
    """New lines of the file at `path` as they are written, across rotations: when the path
    names a new file, what the old one still held is read and the new one is read from its
    start. A file not there yet is waited for."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[bytes] | None = None
        self._inode = 0
        self._pending = b""
        self._open()

    def _open(self) -> bool:
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return False
        self._handle = handle
        self._inode = os.fstat(handle.fileno()).st_ino
        self._pending = b""
        return True

    def _take(self, chunk: bytes) -> list[bytes]:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        return [line for line in lines if line.strip()]

    def read_new(self) -> list[bytes]:
        if self._handle is None and not self._open():
            return []
        assert self._handle is not None
        lines = self._take(self._handle.read())
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return lines  # between the rename and the new file
        if now.st_ino != self._inode or now.st_size < self._handle.tell():
            # Rotated (or replaced): finish the old file, then start the new one.
            lines += self._take(self._handle.read())
            if self._pending.strip():
                lines.append(self._pending)
            self._handle.close()
            self._handle = None
            if self._open():
                lines += self.read_new()
        return lines

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def cmd_logs(args: argparse.Namespace) -> int:
    workspace = target_workspace(args)
    current = log_path(workspace)
    keep = Filter(args.level, args.session)
    as_json: bool = args.json
    count: int | None = args.lines
    if args.follow and count is None:
        count = FOLLOW_LINES
    # Following opens the current file first and reads it through to its end: a line written
    # while the older files are read is shown once, after them.
    follower = Follower(current) if args.follow else None
    lines = itertools.chain(
        read_lines(rotated_files(current)),
        read_lines([current]) if follower is None else follower.read_new(),
    )
    kept: Iterable[bytes] = (line for line in lines if _kept(line, keep, as_json))
    if count is not None:
        kept = deque(kept, maxlen=count)
    out = sys.stdout
    try:
        shown = _write(out, kept, as_json)
        if follower is None:
            if not shown and not current.exists():
                _say_where(workspace, current)
            return EXIT_OK
        try:
            while True:
                lines = [line for line in follower.read_new() if _kept(line, keep, as_json)]
                if lines:
                    _write(out, lines, as_json)
                elif reader_gone(out):
                    return EXIT_OK
                else:
                    time.sleep(POLL_SECONDS)
        finally:
            follower.close()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (`| head`) is gone: nothing more to say, and nowhere to say it.
        silence_stdout()
        return EXIT_OK


def _kept(line: bytes, keep: Filter, as_json: bool) -> bool:
    if not keep.active and not as_json:
        return True
    record = decode(line)
    if record is None and as_json:
        return False
    return keep.keeps(record)


def _write(out: IO[str], lines: Iterable[bytes], as_json: bool) -> int:
    written = 0
    for line in lines:
        text = line.decode(errors="replace")
        if not as_json and (record := decode(line)) is not None:
            text = render(record)
        out.write(text + "\n")
        written += 1
    out.flush()
    return written


def _say_where(workspace: Path, current: Path) -> None:
    stderr = stderr_path(workspace)
    message = f"no log yet for {workspace} (it would be {current})"
    if stderr.exists() and stderr.stat().st_size:
        message += f"; the stderr of daemons started by clients is in {stderr}"
    raise CliError(message, EXIT_USAGE)
