"""The language-server pool: warm servers for the whole workspace, and diagnostics after edits.

One server runs per (spec, root); `servers.py` says which specs exist and how a file's root is
found. A server's lifetime is the pool's, not a turn's or a session's.

Server states (`ServerStatus.state`):

    first use ─► starting ─► running ─► idle for `idle_timeout`, or the pool stops ─► stopped
                    │           │                                                       │
                    │           │ exited, closed its pipes, broke the framing            │ next use
                    ▼           ▼                                                       ▼
                 crashed ◄── (or no answer to initialize within initialize_timeout)  starting
                    │ next use, once the backoff has passed
                    ▼
                restarting ─► running | crashed

Rules:
- A server starts the first time a file of its language is touched (`prewarm`,
  `diagnostics_after_edit`) and stays up across turns and sessions until it has been idle for
  `idle_timeout` or the pool stops; then it is asked to `shutdown` and `exit`, and its process
  group is killed.
- A crash is reported at once, never silently: `on_event("server_crashed", ServerEvent)`. The
  server is restarted on its next use, after a backoff counted from the crash: 1 s, then 2, 4,
  … up to `max_backoff` while it keeps failing (a run of `HEALTHY_RUN` seconds starts the count
  again). A server that crashed after a good start, for the first time in a row, is
  restarted within the call that needs it (which waits out that first second); one that fails
  again, or fails while starting, is skipped by calls made before its next attempt is due, so
  a broken server does not slow down every edit.
- Every wait is bounded: a start by `initialize_timeout`, a diagnostics wait by `wait`, the
  pool's shutdown by `shutdown_timeout` plus the kill grace (servers stop in parallel). No
  language-server failure raises out of the pool; a hung server only costs the bounded wait.

Diagnostics after an edit (`diagnostics_after_edit`):
1. start (or restart) the servers for the files, in parallel;
2. send each file's content as it is on disk: `didOpen` the first time, else `didChange` with
   the next version when it differs, then `didSave`; a file that is gone is closed. Servers
   that registered for file events also get `workspace/didChangeWatchedFiles` for every path
   in the call (so ruff sees an edited `pyproject.toml`);
3. wait, at most `wait` seconds from then, until every (server, file) pair is current: a pulled
   result (servers with `diagnosticProvider` are asked with `textDocument/diagnostic`), or a
   push for the version sent. A push without a version cannot say it is current: once every
   pair has had a report since the sync, the wait ends `settle` seconds after the last change.
   (The seed ended the wait `settle` after any change; waiting for each server keeps a fast
   linter's answer from cutting off the type checker's.)
4. return the error-severity diagnostics of those files; clients get every severity through
   `on_event("diagnostics", DiagnosticsEvent)`.
"""

import contextlib
import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec
import trio

from tether.daemon.lsp.client import (
    INITIALIZE_TIMEOUT,
    REQUEST_TIMEOUT,
    SHUTDOWN_TIMEOUT,
    LspClient,
    LspDiagnostic,
    path_to_uri,
)
from tether.daemon.lsp.errors import LspError, ServerGone
from tether.daemon.lsp.servers import (
    AvailableServer,
    LspServerConfig,
    ServerSpec,
    available_servers,
    merge_specs,
)

ServerState = Literal["starting", "running", "crashed", "restarting", "stopped"]
Severity = Literal["error", "warning", "information", "hint"]
EventKind = Literal[
    "server_started", "server_restarted", "server_crashed", "server_stopped", "diagnostics"
]

IDLE_TIMEOUT = 30 * 60.0
MAX_BACKOFF = 30.0
HEALTHY_RUN = 60.0
"""A server that ran this long before crashing gets the shortest backoff again."""
MAX_OPEN_DOCUMENTS = 200
"""Documents kept open per server; the least recently checked are closed beyond this."""
MAX_SYNC_BYTES = 4 * 1024 * 1024
"""Larger files are not sent to servers."""
REPORT_LIMIT = 15
MAX_MESSAGE_CHARS = 400

_SEVERITIES: dict[int, Severity] = {1: "error", 2: "warning", 3: "information", 4: "hint"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True):
    """One problem a language server reported in a file."""

    path: str
    """Absolute path of the file."""
    line: int
    """1-based."""
    column: int
    """1-based, in characters (code points), whatever encoding the server counts in."""
    severity: Severity
    message: str
    source: str
    """Who says so: the server's own label (`basedpyright`, `Ruff`), else the spec's name."""
    code: str = ""
    """The rule or error code, when the server gives one (`reportAssignmentType`, `F821`)."""


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    root: str
    state: ServerState
    pid: int | None
    restarts: int
    last_error: str
    command: list[str]
    open_documents: int


class ServerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A server started, restarted, crashed or stopped; `message` is ready for a notice."""

    server: str
    root: str
    message: str
    pid: int | None = None
    restarts: int = 0


class DiagnosticsEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Every diagnostic (all severities) of the files one `diagnostics_after_edit` checked."""

    paths: list[str]
    diagnostics: list[Diagnostic]


OnEvent = Callable[[EventKind, ServerEvent | DiagnosticsEvent], None]


class _Entry:
    """One (spec, root): the server running there, if any, and its history."""

    def __init__(self, spec: ServerSpec, root: Path, command: list[str]) -> None:
        self.spec = spec
        self.root = root
        self.command = command
        self.client: LspClient | None = None
        self.state: ServerState = "stopped"
        self.pid: int | None = None
        self.restarts = 0
        self.failures = 0
        """Consecutive crashes (the backoff grows with them)."""
        self.crashed_running = False
        """The last crash came after a good start (not at startup)."""
        self.retry_at = 0.0
        self.last_error = ""
        self.last_used = 0.0
        self.users = 0
        """Calls using the server right now (an idle stop waits for them)."""
        self.stop_reason = ""
        self.recent: dict[str, None] = {}
        """Open documents' URIs, least recently synced first."""
        self.lock = trio.Lock()

    @property
    def alive(self) -> bool:
        return self.client is not None and self.client.alive


class _Target:
    """One (server, file) pair of a diagnostics call."""

    def __init__(self, entry: _Entry, path: Path) -> None:
        self.entry = entry
        self.path = path
        self.uri = path_to_uri(path)
        self.client: LspClient | None = None
        self.baseline = 0
        """The client's report serial before the sync: later reports are fresh."""
        self.version: int | None = None
        self.fresh = False
        self.done = False
        self.pulling = False


class LspPool:
    """The workspace's language servers. Run `serve` in the daemon's nursery; then call
    `diagnostics_after_edit` from turns, `prewarm` when files are read, `status` for clients.
    """

    def __init__(
        self,
        workspace: Path,
        servers: Sequence[LspServerConfig] = (),
        *,
        builtin: bool | Collection[str] = True,
        on_event: OnEvent | None = None,
        initialize_timeout: float = INITIALIZE_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        max_backoff: float = MAX_BACKOFF,
        max_open_documents: int = MAX_OPEN_DOCUMENTS,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        search_path: str | None = None,
    ) -> None:
        """`servers`: from the user's config (see `servers.merge_specs`); `builtin`: all
        built-in servers, none, or the names to keep. `idle_timeout` ≤ 0: never stop idle
        servers. `log_dir`: each server's stderr goes to a file there (else nowhere).
        `env`: the servers' environment (default: the daemon's, without secrets).
        `search_path`: PATH for finding programs (default: the environment's)."""
        self.workspace = workspace.resolve()
        self.on_event = on_event
        self.initialize_timeout = initialize_timeout
        self.request_timeout = request_timeout
        self.shutdown_timeout = shutdown_timeout
        self.idle_timeout = idle_timeout
        self.max_backoff = max_backoff
        self.max_open_documents = max_open_documents
        self.log_dir = log_dir
        self.env = env
        specs = merge_specs(servers, builtin=builtin)
        self._available = available_servers(specs, path=search_path)
        self._specs: list[ServerSpec] = []
        self._commands: dict[str, list[str]] = {}
        for spec, found in zip(specs, self._available, strict=True):
            if found.command is not None:
                self._specs.append(spec)
                self._commands[spec.name] = found.command
        self._entries: dict[tuple[str, Path], _Entry] = {}
        self._nursery: trio.Nursery | None = None
        self._changed = trio.Event()

    # --- service ------------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the servers until cancelled. Cancellation stops every server in parallel:
        `shutdown`/`exit`, at most `shutdown_timeout` each, then their process groups are
        killed; `serve` returns (re-raising the cancellation) once all are gone."""
        async with trio.open_nursery() as nursery:
            if self.idle_timeout > 0:
                nursery.start_soon(self._watch_idle)
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                # The servers' own tasks see the cancellation and stop themselves; nothing
                # new may start while they do.
                self._nursery = None

    def available(self) -> list[AvailableServer]:
        """Every server spec in force and the command that runs it (None: not installed)."""
        return list(self._available)

    def status(self) -> list[ServerStatus]:
        """The servers started so far, one per (server, root), in the order they started."""
        return [
            ServerStatus(
                name=entry.spec.name,
                root=str(entry.root),
                state=entry.state,
                pid=entry.pid,
                restarts=entry.restarts,
                last_error=entry.last_error,
                command=list(entry.command),
                open_documents=len(entry.client.documents) if entry.client and entry.alive else 0,
            )
            for entry in self._entries.values()
        ]

    def prewarm(self, paths: Iterable[Path]) -> None:
        """Start, in the background, the servers these files would need (a file was read;
        an edit is likely). Does not wait; does nothing when the pool is not serving or a
        server is backing off after crashes."""
        if self._nursery is not None:
            self._nursery.start_soon(self._prewarm, list(paths))

    async def _prewarm(self, paths: list[Path]) -> None:
        now = trio.current_time()
        async with trio.open_nursery() as nursery:
            _, located = await self._locate(paths)
            for entry in self._entries_for(located):
                if entry.alive or entry.lock.locked():
                    continue
                if entry.state == "crashed" and entry.retry_at > now:
                    continue
                entry.last_used = now
                nursery.start_soon(self._ensure_running, entry, 0.0)

    # --- diagnostics --------------------------------------------------------------------------

    async def diagnostics_after_edit(
        self, paths: Iterable[Path], *, wait: float = 1.5, settle: float = 0.25
    ) -> list[Diagnostic]:
        """Sync these files (absolute, or relative to the workspace) to their servers and
        return the error-severity diagnostics the servers report for them, sorted by path and
        position. Files outside the workspace or of no server's language are ignored.

        Takes at most `wait` seconds after the files are sent, plus, for servers that are not
        running yet, the time to start them (at most `initialize_timeout`, once; `prewarm`
        hides it) and up to the first backoff second after a crash. Never raises for a server's
        failure: that server's diagnostics are just missing (its crash is reported through
        `on_event`). Cancellation propagates; requests in flight are cancelled and a server
        being started for this call is stopped (it starts again on the next use)."""
        if self._nursery is None:
            return []
        files, located = await self._locate(paths)
        targets = [
            _Target(entry, path)
            for (path, _, _), entry in zip(located, self._entries_for(located), strict=True)
        ]
        if not targets:
            return []
        entries = list({id(t.entry): t.entry for t in targets}.values())
        for entry in entries:
            entry.users += 1
        try:
            async with trio.open_nursery() as nursery:
                for entry in entries:
                    nursery.start_soon(self._ensure_running, entry, wait)
            checked = list(dict.fromkeys(target.path for target in targets))
            texts, gone = await trio.to_thread.run_sync(_read_files, files, checked)
            deadline = trio.current_time() + wait
            self._sync(targets, files, texts, gone)
            await self._wait(targets, deadline, settle)
        finally:
            now = trio.current_time()
            for entry in entries:
                entry.users -= 1
                entry.last_used = now
        diagnostics = sorted(
            (d for target in targets for d in self._collect(target)),
            key=lambda d: (d.path, d.line, d.column, d.source, d.message),
        )
        self._emit(
            "diagnostics",
            DiagnosticsEvent(paths=[str(path) for path in files], diagnostics=diagnostics),
        )
        return [d for d in diagnostics if d.severity == "error"]

    async def _locate(
        self, paths: Iterable[Path]
    ) -> tuple[list[Path], list[tuple[Path, ServerSpec, Path]]]:
        """The files inside the workspace, and (file, spec, root) for each spec that checks one
        of them; in a thread (resolving paths and looking for root markers touch the disk)."""
        return await trio.to_thread.run_sync(self._locate_sync, list(paths))

    def _locate_sync(
        self, paths: list[Path]
    ) -> tuple[list[Path], list[tuple[Path, ServerSpec, Path]]]:
        files: list[Path] = []
        located: list[tuple[Path, ServerSpec, Path]] = []
        for given in dict.fromkeys(paths):
            try:
                path = (self.workspace / given).resolve()
            except (OSError, RuntimeError):  # a symlink loop, an unreadable folder
                continue
            if self.workspace not in path.parents or path in files:
                continue
            files.append(path)
            for spec in self._specs:
                if spec.handles(path):
                    located.append((path, spec, spec.root_for(path, self.workspace)))
        return files, located

    def _entries_for(self, located: list[tuple[Path, ServerSpec, Path]]) -> list[_Entry]:
        """The entry for each (file, spec, root), created on first sight."""
        entries: list[_Entry] = []
        for _, spec, root in located:
            entry = self._entries.get((spec.name, root))
            if entry is None:
                entry = self._entries[spec.name, root] = _Entry(
                    spec, root, self._commands[spec.name]
                )
            entries.append(entry)
        return entries

    def _sync(
        self,
        targets: list[_Target],
        files: list[Path],
        texts: Mapping[Path, str],
        gone: set[Path],
    ) -> None:
        """Send every target's content (no checkpoints: concurrent calls cannot interleave)."""
        for entry in {id(t.entry): t.entry for t in targets}.values():
            client = entry.client
            if client is not None and client.alive:
                events = [
                    (path_to_uri(path), 3 if path in gone else 2)
                    for path in files
                    if entry.root == path or entry.root in path.parents
                ]
                with contextlib.suppress(ServerGone):
                    client.notify_files_changed(events)
        for target in targets:
            client = target.entry.client
            if client is None or not client.alive or target.path not in texts:
                if client is not None and client.alive and target.path in gone:
                    with contextlib.suppress(ServerGone):
                        client.close(target.uri)
                    target.entry.recent.pop(target.uri, None)
                target.done = True
                continue
            text = texts[target.path]
            try:
                target.client = client
                target.baseline = client.serial
                changed = client.sync(target.uri, target.entry.spec.language_for(target.path), text)
                if changed:
                    client.save(target.uri)
                document = client.documents[target.uri]
                target.version = document.version
                report = client.reports.get(target.uri)
                if (
                    not changed
                    and not client.pulls_diagnostics
                    and report is not None
                    and (
                        report.version == document.version
                        or (report.version is None and report.serial > document.synced_serial)
                    )
                ):
                    # The text is what the server already has, and it has spoken about it.
                    target.baseline = report.serial - 1
                    target.fresh = target.done = True
                self._touch_document(target, {t.uri for t in targets if t.entry is target.entry})
            except ServerGone:
                target.done = True

    def _touch_document(self, target: _Target, keep: set[str]) -> None:
        recent = target.entry.recent
        recent.pop(target.uri, None)
        recent[target.uri] = None
        client = target.client
        assert client is not None
        while len(recent) > self.max_open_documents:
            oldest = next(iter(recent))
            if oldest in keep:
                break
            del recent[oldest]
            client.close(oldest)

    async def _wait(self, targets: list[_Target], deadline: float, settle: float) -> None:
        waiting = [t for t in targets if not t.done]
        if not waiting:
            return
        last_change: float | None = None
        async with trio.open_nursery() as nursery:
            while True:
                changed = self._changed
                for target in waiting:
                    if self._check(target):
                        last_change = trio.current_time()
                    client = target.client
                    if target.done or client is None:
                        continue
                    if not client.alive:
                        target.done = True
                    elif client.pulls_diagnostics and not target.pulling:
                        target.pulling = True
                        nursery.start_soon(self._pull, target, client, deadline)
                if all(t.done for t in waiting):
                    break
                until = deadline
                if last_change is not None and all(t.done or t.fresh for t in waiting):
                    until = min(until, last_change + settle)
                if trio.current_time() >= until:
                    break
                with trio.move_on_at(until):
                    await changed.wait()
            nursery.cancel_scope.cancel()

    def _check(self, target: _Target) -> bool:
        """Mark the target fresh or done from its latest report; return whether that report is
        new since the last look."""
        client = target.client
        if target.done or client is None:
            return False
        report = client.reports.get(target.uri)
        if report is None or report.serial <= target.baseline:
            return False
        target.baseline = report.serial
        target.fresh = True
        if report.version is not None and report.version == target.version:
            target.done = True
        return True

    async def _pull(self, target: _Target, client: LspClient, deadline: float) -> None:
        try:
            with trio.move_on_at(deadline):
                await client.pull_diagnostics(target.uri)
        except LspError:
            pass
        finally:
            # Answered, or not in time, or the server is gone: nothing more from it this time.
            self._check(target)
            target.done = True
            target.pulling = False
            self._wake()

    def _collect(self, target: _Target) -> list[Diagnostic]:
        client = target.client
        if client is None or not target.fresh:
            return []
        report = client.reports.get(target.uri)
        document = client.documents.get(target.uri)
        if report is None:
            return []
        lines: list[str] | None = None
        encoding = client.capabilities.positionEncoding or "utf-16"
        result: list[Diagnostic] = []
        for item in report.items:
            start = item.range.start
            line_text = ""
            if document is not None:
                if lines is None:
                    lines = _LINE_BREAK.split(document.text)
                if 0 <= start.line < len(lines):
                    line_text = lines[start.line]
            result.append(
                _diagnostic(
                    item,
                    path=str(target.path),
                    column=character_to_column(line_text, start.character, encoding),
                    source=item.source or target.entry.spec.name,
                )
            )
        return result

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # --- starting, crashing, stopping ---------------------------------------------------------

    async def _ensure_running(self, entry: _Entry, budget: float) -> None:
        """Make sure the entry's server runs, starting or restarting it if it may; waits for
        a first backoff of at most `budget` seconds. Never raises for the server's failure."""
        async with entry.lock:
            if entry.alive:
                return
            previous = entry.client
            if previous is not None and not previous.finished.is_set():
                # It failed a moment ago and is still being reaped: let it finish, so that
                # its crash is recorded (and counted in the backoff) before the restart.
                with trio.move_on_after(self.shutdown_timeout + 3.0):
                    await previous.finished.wait()
                if not previous.finished.is_set():
                    return
            if entry.state == "crashed":
                delay = entry.retry_at - trio.current_time()
                if delay > 0:
                    if entry.failures > 1 or not entry.crashed_running or delay > budget:
                        return
                    await trio.sleep(delay)
            nursery = self._nursery
            if nursery is None:
                return
            restarting = entry.state == "crashed"
            entry.state = "restarting" if restarting else "starting"
            if restarting:
                entry.restarts += 1
            entry.stop_reason = ""
            entry.recent.clear()
            client = LspClient(
                entry.command,
                entry.root,
                name=entry.spec.name,
                settings=entry.spec.settings,
                initialization_options=entry.spec.initialization_options,
                log_path=self._log_path(entry),
                env=self.env,
                initialize_timeout=self.initialize_timeout,
                request_timeout=self.request_timeout,
                shutdown_timeout=self.shutdown_timeout,
                on_change=self._wake,
            )
            entry.client = client
            try:
                await nursery.start(self._supervise, entry, client)
            except LspError:
                return  # recorded and reported by _supervise
            entry.state = "running"
            entry.pid = client.pid
            entry.last_used = trio.current_time()
            kind: EventKind = "server_restarted" if restarting else "server_started"
            what = f"restarted (restart {entry.restarts})" if restarting else "started"
            self._emit(kind, self._server_event(entry, f"{self._label(entry)} {what}"))

    async def _supervise(
        self,
        entry: _Entry,
        client: LspClient,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await client.serve(task_status=task_status)
        finally:
            self._ended(entry, client)

    def _ended(self, entry: _Entry, client: LspClient) -> None:
        if entry.client is not client:
            return
        entry.pid = None
        entry.recent.clear()
        if client.state != "crashed":
            entry.state = "stopped"
            if entry.stop_reason == "idle":
                self._emit(
                    "server_stopped",
                    self._server_event(
                        entry, f"{self._label(entry)} stopped after {self.idle_timeout:g} s idle"
                    ),
                )
            return
        now = trio.current_time()
        ran = now - client.started_at if client.started_at is not None else 0.0
        entry.failures = 1 if ran >= HEALTHY_RUN else entry.failures + 1
        entry.crashed_running = client.started_at is not None
        delay = min(self.max_backoff, 2.0 ** (entry.failures - 1))
        entry.retry_at = now + delay
        entry.state = "crashed"
        entry.last_error = client.failure or "stopped unexpectedly"
        self._emit(
            "server_crashed",
            self._server_event(
                entry,
                f"{self._label(entry)} {entry.last_error}; it will be restarted when next "
                f"needed (in {delay:g} s at the earliest)",
                pid=client.pid,
            ),
        )

    async def _watch_idle(self) -> None:
        interval = max(0.05, min(60.0, self.idle_timeout / 4))
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for entry in self._entries.values():
                client = entry.client
                if (
                    client is not None
                    and client.alive
                    and entry.users == 0
                    and not entry.lock.locked()
                    and now - entry.last_used >= self.idle_timeout
                ):
                    entry.stop_reason = "idle"
                    client.stop()

    # --- helpers ------------------------------------------------------------------------------

    def _log_path(self, entry: _Entry) -> Path | None:
        if self.log_dir is None:
            return None
        tag = hashlib.sha256(str(entry.root).encode()).hexdigest()[:8]
        return self.log_dir / f"{entry.spec.name}-{tag}.log"

    def _label(self, entry: _Entry) -> str:
        if entry.root == self.workspace:
            return f"Language server {entry.spec.name}"
        return f"Language server {entry.spec.name} ({_relative(entry.root, self.workspace)})"

    def _server_event(self, entry: _Entry, message: str, pid: int | None = None) -> ServerEvent:
        return ServerEvent(
            server=entry.spec.name,
            root=str(entry.root),
            message=message,
            pid=entry.pid if pid is None else pid,
            restarts=entry.restarts,
        )

    def _emit(self, kind: EventKind, detail: ServerEvent | DiagnosticsEvent) -> None:
        if self.on_event is not None:
            self.on_event(kind, detail)


def _read_files(files: list[Path], checked: list[Path]) -> tuple[dict[Path, str], set[Path]]:
    """The text of each file to check (unreadable and oversized ones are left out), and which
    of `files` are gone."""
    texts: dict[Path, str] = {}
    gone = {path for path in files if not path.exists()}
    for path in checked:
        try:
            if path.stat().st_size <= MAX_SYNC_BYTES:
                texts[path] = path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            gone.add(path)
        except OSError:
            pass
    return texts, gone


def character_to_column(line: str, character: int, encoding: str = "utf-16") -> int:
    """A 1-based column in code points from an LSP `character` offset, counted in `encoding`
    units (`utf-16`, the default, `utf-8` or `utf-32`) within `line`."""
    if character <= 0:
        return 1
    if line.isascii() or encoding == "utf-32":
        return character + 1
    if encoding == "utf-8":
        return len(line.encode("utf-8")[:character].decode("utf-8", errors="ignore")) + 1
    units = 0
    for index, char in enumerate(line):
        if units >= character:
            return index + 1
        units += 2 if ord(char) > 0xFFFF else 1
    return len(line) + (character - units) + 1


def _diagnostic(item: LspDiagnostic, *, path: str, column: int, source: str) -> Diagnostic:
    return Diagnostic(
        path=path,
        line=item.range.start.line + 1,
        column=column,
        severity=_SEVERITIES.get(item.severity or 1, "error"),
        message=item.message,
        source=source,
        code="" if item.code is None else str(item.code),
    )


def _relative(path: Path, workspace: Path) -> str:
    try:
        return str(path.relative_to(workspace)) or "."
    except ValueError:
        return str(path)


def _one_line(message: str) -> str:
    parts = [part.strip().replace("\xa0", " ") for part in message.splitlines()]
    text = "; ".join(part for part in parts if part)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def format_report(
    diagnostics: Sequence[Diagnostic], workspace: Path, limit: int = REPORT_LIMIT
) -> str:
    """The errors among `diagnostics` as text for the model: a heading, at most `limit` lines
    `path:line:column: error: message [source code]` (paths relative to the workspace), and
    `... and N more`. An error at the same spot as one already listed from another server
    (ruff's F821 and pyright's reportUndefinedVariable) is the same problem and is left out.
    Empty when there is no error."""
    errors: list[Diagnostic] = []
    first_source: dict[tuple[str, int, int], str] = {}
    for d in diagnostics:
        if d.severity != "error":
            continue
        source = first_source.setdefault((d.path, d.line, d.column), d.source)
        if source == d.source:
            errors.append(d)
    if not errors:
        return ""
    root = workspace.resolve()
    lines = ["Errors reported by language servers:"]
    for d in errors[:limit]:
        label = f"{d.source} {d.code}" if d.code else d.source
        lines.append(
            f"{_relative(Path(d.path), root)}:{d.line}:{d.column}: error: "
            f"{_one_line(d.message)} [{label}]"
        )
    if len(errors) > limit:
        lines.append(f"... and {len(errors) - limit} more")
    return "\n".join(lines)
