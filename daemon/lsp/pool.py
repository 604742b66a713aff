"""The language-server pool: warm servers for the whole workspace, and diagnostics after edits.

One server runs per (spec, root); `servers.py` says which specs exist and how a file's root is
found. A server's lifetime is the pool's, not a turn's or a session's.

Server states (`LspServerStatus.state` in `lsp/status`):

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
  server is restarted on its next use, after a backoff counted from the crash: `backoff` (1 s),
  then twice that, four times, … up to `max_backoff` while it keeps failing (a run of
  `HEALTHY_RUN` seconds starts the count again). A server that crashed after a good start,
  for the first time in a row, is restarted within the call that needs it (which waits out
  that first backoff); one that fails again, or fails while starting, is skipped by calls made
  before its next attempt is due, so a broken server does not slow down every edit. A call
  waiting for diagnostics is done with a server as soon as it ends.
- Every wait is bounded: a start by `initialize_timeout`, a diagnostics wait by `wait`, the
  pool's shutdown by `shutdown_timeout` plus the kill grace (servers stop in parallel). No
  language-server failure raises out of the pool; a hung server only costs the bounded wait.

Trust (`trusted`, asked at each start): in a workspace the user does not trust, a server starts
in its restricted form (`servers.restricted_form`: nothing of the workspace runs), or not at
all when it has none (its status says why); `LspServerStatus.restricted` tells which ran so.
In a trusted one, the TypeScript server runs the project's own TypeScript where it has one
(`servers.trusted_command`).
`trust_changed` stops the servers started under the other answer; they start again, in the
form the new answer calls for, on their next use.

Diagnostics after an edit (`check_after_edit`): start (or restart) the servers for the files,
in parallel; then send the files and wait until each server has spoken about them
(`diagnostics.py` has the rules) — longer, `first_wait`, for a server still starting, whose
first analysis loads the project; return the error-severity diagnostics of those files and
which servers spoke about them (`Coverage`), so that "no errors" is told from "not checked". Clients
get every severity through `on_event("diagnostics", DiagnosticsEvent)`; `report.py` makes the
text for the model.
"""

import hashlib
from collections.abc import AsyncGenerator, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import msgspec
import trio

from tether.daemon.logs.log import bind, get_logger
from tether.daemon.lsp.client import (
    INITIALIZE_TIMEOUT,
    REQUEST_TIMEOUT,
    SHUTDOWN_TIMEOUT,
    LspClient,
)
from tether.daemon.lsp.diagnostics import (
    Coverage,
    Diagnostic,
    ReportSignal,
    Target,
    collect,
    coverage,
    read_files,
    sync_targets,
    touch_document,
    wait_until_current,
)
from tether.daemon.lsp.errors import LspError, Unavailable
from tether.daemon.lsp.servers import (
    RESTRICTED_NOTE,
    LspServerConfig,
    ServerSpec,
    available_servers,
    merge_specs,
    missing_server_note,
    restricted_form,
    trusted_command,
)
from tether.daemon.nursery import LentNursery
from tether.daemon.workspace import display_path
from tether.protocol.methods import LspServerStatus

ServerState = Literal["starting", "running", "crashed", "restarting", "stopped"]
EventKind = Literal[
    "server_started", "server_restarted", "server_crashed", "server_stopped", "diagnostics"
]

log = get_logger(__name__)

IDLE_TIMEOUT = 30 * 60.0
DIAGNOSTICS_WAIT = 1.5
"""Seconds a call waits for diagnostics after it sent the edited files (see `Config`)."""
FIRST_WAIT = 10.0
"""Seconds a call waits for a server still starting: its first analysis loads the project."""
BACKOFF = 1.0
"""The wait before restarting a server after its first crash in a row."""
MAX_BACKOFF = 30.0
HEALTHY_RUN = 60.0
"""A server that ran this long before crashing gets the shortest backoff again."""
MAX_OPEN_DOCUMENTS = 200
"""Documents kept open per server; the least recently checked are closed beyond this."""


class ServerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A server started, restarted, crashed or stopped; `message` is ready for a notice."""

    server: str
    root: str
    message: str
    pid: int | None = None
    restarts: int = 0


class EditCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What the servers said about edited files: the errors, and who spoke."""

    errors: list[Diagnostic] = []
    coverage: Coverage = Coverage()


class DiagnosticsEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Every diagnostic (all severities) of the files one `diagnostics_after_edit` checked."""

    paths: list[str]
    diagnostics: list[Diagnostic]


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """A server lent for questions about one file, open in it (see `LspPool.lease`)."""

    client: LspClient
    path: Path
    uri: str
    text: str
    """The file's text, as sent to the server."""
    server: str
    just_started: bool
    """The server was started for this call: it may still be indexing the project."""


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
        self.restricted = False
        """It was started in its restricted form (the workspace was not trusted)."""
        self.trusted = False
        """It was started while the workspace was trusted."""
        self.retry_at = 0.0
        self.last_error = ""
        self.last_used = 0.0
        self.users = 0
        """Calls using the server right now (an idle stop waits for them)."""
        self.stop_reason = ""
        self.first_waited = False
        """A call has waited for this run of the server as a starting one."""
        self.recent: dict[str, None] = {}
        """Open documents' URIs, least recently synced first."""
        self.lock = trio.Lock()

    @property
    def alive(self) -> bool:
        return self.client is not None and self.client.alive


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
        diagnostics_wait: float = DIAGNOSTICS_WAIT,
        first_wait: float = FIRST_WAIT,
        backoff: float = BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        max_open_documents: int = MAX_OPEN_DOCUMENTS,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        search_path: str | None = None,
        trusted: Callable[[], bool] | None = None,
    ) -> None:
        """`servers`: from the user's config (see `servers.merge_specs`); `builtin`: all
        built-in servers, none, or the names to keep. `idle_timeout` ≤ 0: never stop idle
        servers. `log_dir`: each server's stderr goes to a file there (else nowhere).
        `env`: the servers' environment (default: the daemon's, without secrets).
        `first_wait`: the diagnostics wait for a server still starting (see
        `check_after_edit`). `search_path`: PATH for finding programs (default: the environment's).
        `trusted`: whether the user trusts the workspace now (default: never)."""
        self.workspace = workspace.resolve()
        self._projects: list[Path] = [self.workspace]
        """The folders whose files the servers check: the workspace, and the worktrees its
        sessions work in (`add_project`), each with servers of its own."""
        self.trusted = trusted if trusted is not None else lambda: False
        self.on_event = on_event
        self.initialize_timeout = initialize_timeout
        self.diagnostics_wait = diagnostics_wait
        self.first_wait = first_wait
        self.request_timeout = request_timeout
        self.shutdown_timeout = shutdown_timeout
        self.idle_timeout = idle_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_open_documents = max_open_documents
        self.log_dir = log_dir
        self.env = env
        self.search_path = search_path
        specs = merge_specs(servers, builtin=builtin)
        available = available_servers(specs, path=search_path)
        self._specs: list[ServerSpec] = []
        self._missing: list[ServerSpec] = []
        """Specs in force whose program is not installed (what a user could install)."""
        self._commands: dict[str, list[str]] = {}
        for spec, found in zip(specs, available, strict=True):
            if found.command is not None:
                self._specs.append(spec)
                self._commands[spec.name] = found.command
            else:
                self._missing.append(spec)
        self._entries: dict[tuple[str, Path], _Entry] = {}
        self._lent = LentNursery()
        self._reports = ReportSignal()

    # --- service ------------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the servers until cancelled. Cancellation stops every server in parallel:
        `shutdown`/`exit`, at most `shutdown_timeout` each, then their process groups are
        killed; `serve` returns (re-raising the cancellation) once all are gone."""
        async with trio.open_nursery() as nursery:
            if self.idle_timeout > 0:
                nursery.start_soon(self._watch_idle)
            # The servers' own tasks see the cancellation and stop themselves.
            await self._lent.lend(nursery, task_status)

    def status(self) -> list[LspServerStatus]:
        """The servers started so far, one per (server, root), in the order they started, as
        `lsp/status` answers."""
        return [
            LspServerStatus(
                name=entry.spec.name,
                root=str(entry.root),
                state=entry.state,
                pid=entry.pid,
                restarts=entry.restarts,
                last_error=entry.last_error,
                restricted=entry.restricted,
            )
            for entry in self._entries.values()
        ]

    def trust_changed(self) -> None:
        """The user trusts the workspace now, or no more: stop the servers started under the
        other answer (they start again on their next use, in the form it calls for)."""
        trusted = self.trusted()
        for entry in self._entries.values():
            client = entry.client
            if client is not None and client.alive and entry.trusted != trusted:
                entry.stop_reason = "trust"
                client.stop()

    def restricted_note(self) -> str:
        """What the model should know with diagnostics while servers run restricted ("" when
        none does)."""
        if self.trusted() or not any(e.restricted for e in self._entries.values()):
            return ""
        return RESTRICTED_NOTE

    def prewarm(self, paths: Iterable[Path]) -> None:
        """Start, in the background, the servers these files would need (a file was read;
        an edit is likely). Does not wait; does nothing when the pool is not serving or a
        server is backing off after crashes. A file no server checks by its name (most reads:
        a README, a folder) costs nothing, not even a task."""
        wanted = [path for path in paths if any(spec.handles(path) for spec in self._specs)]
        if wanted and self._lent.nursery is not None:
            self._lent.nursery.start_soon(self._prewarm, wanted)

    async def _prewarm(self, paths: list[Path]) -> None:
        now = trio.current_time()
        async with trio.open_nursery() as nursery:
            _, located = await self._locate(paths)
            for entry in self._entries_for(located):
                if self._current(entry) or entry.lock.locked():
                    continue
                if entry.state == "crashed" and entry.retry_at > now:
                    continue
                entry.last_used = now
                nursery.start_soon(self._ensure_running, entry, 0.0)

    # --- questions about code ------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, path: Path, capability: str) -> AsyncGenerator["Lease"]:
        """The first server of `path` (absolute, or relative to the workspace) whose
        capabilities include `capability` (`definitionProvider`, …), started if need be, with
        the file as it is on disk open in it. The server is not stopped for idleness while
        leased.

        Raises Unavailable, with a message for the model, when none can answer: the file is
        outside the workspace or unreadable, no installed server covers its language, or the
        servers that do are not running (crashed, backing off, not started in an untrusted
        workspace). Starting a server takes at most `initialize_timeout`. Cancellation
        propagates (a server being started for this call is stopped)."""
        if self._lent.nursery is None:
            raise Unavailable("Language servers are not running in this daemon.")
        files, located = await self._locate([path])
        if not files:
            raise Unavailable(f"{path} is not a file inside the workspace.")
        file = files[0]
        if not located:
            raise Unavailable(missing_server_note(file, self._missing))
        reasons: list[str] = []
        for entry in self._entries_for(located):
            entry.users += 1
            try:
                was_running = self._current(entry)
                await self._ensure_running(entry, self.backoff)
                client = entry.client
                if client is None or not client.alive:
                    reasons.append(f"{entry.spec.name}: {entry.last_error or 'not running'}")
                    continue
                if getattr(client.capabilities, capability) in (None, False):
                    reasons.append(f"{entry.spec.name} does not answer this")
                    continue
                texts, gone = await trio.to_thread.run_sync(
                    read_files, self.workspace, [file], [file]
                )
                if file not in texts:
                    why = "does not exist" if file in gone else "could not be read or is too large"
                    raise Unavailable(f"{display_path(self.workspace, file)} {why}.")
                target = Target(entry, file)
                target.client = client
                client.sync(target.uri, entry.spec.language_for(file), texts[file])
                touch_document(target, {target.uri}, self.max_open_documents)
                yield Lease(
                    client=client,
                    path=file,
                    uri=target.uri,
                    text=texts[file],
                    server=entry.spec.name,
                    just_started=not was_running,
                )
                return
            finally:
                entry.users -= 1
                entry.last_used = trio.current_time()
        raise Unavailable(
            f"No language server could answer about {display_path(self.workspace, file)} ("
            + "; ".join(reasons)
            + ")."
        )

    def running(self, capability: str) -> list[tuple[str, LspClient]]:
        """(name, client) of each running server whose capabilities include `capability`."""
        return [
            (entry.spec.name, entry.client)
            for entry in self._entries.values()
            if entry.client is not None
            and self._current(entry)
            and getattr(entry.client.capabilities, capability) not in (None, False)
        ]

    # --- diagnostics --------------------------------------------------------------------------

    async def diagnostics_after_edit(
        self,
        paths: Iterable[Path],
        *,
        wait: float | None = None,
        first_wait: float | None = None,
        settle: float = 0.25,
    ) -> list[Diagnostic]:
        """The errors of `check_after_edit`."""
        check = await self.check_after_edit(paths, wait=wait, first_wait=first_wait, settle=settle)
        return check.errors

    async def check_after_edit(
        self,
        paths: Iterable[Path],
        *,
        wait: float | None = None,
        first_wait: float | None = None,
        settle: float = 0.25,
    ) -> EditCheck:
        """Sync these files (absolute, or relative to the workspace) to their servers; return
        the error-severity diagnostics the servers report for them, sorted by path and
        position, and which servers spoke about them. Files outside the workspace or of no
        server's language are ignored.

        Takes at most `wait` seconds after the files are sent — `first_wait` (never less) for
        a server still starting: one that has reported on nothing since it started, the first
        time it is waited for — plus, for servers that are not running yet, the time to start
        them (at most `initialize_timeout`, once; `prewarm` hides it) and up to the first
        backoff after a crash. Never raises for a server's failure: that server's diagnostics
        are just missing (its crash is reported through `on_event`), and `coverage` says so.
        Cancellation propagates; requests in flight are cancelled and a server being started
        for this call is stopped (it starts again on the next use)."""
        if self._lent.nursery is None:
            return EditCheck()
        wait = self.diagnostics_wait if wait is None else wait
        first_wait = max(wait, self.first_wait if first_wait is None else first_wait)
        files, located = await self._locate(paths)
        pairs = list(zip(located, self._entries_for(located), strict=True))
        targets = [Target(entry, path) for (path, _, _), entry in pairs]
        if not targets:
            return EditCheck()
        entries = list({id(entry): entry for _, entry in pairs}.values())
        for entry in entries:
            entry.users += 1
        try:
            async with trio.open_nursery() as nursery:
                for entry in entries:
                    nursery.start_soon(self._ensure_running, entry, wait)
            checked = list(dict.fromkeys(target.path for target in targets))
            texts, gone = await trio.to_thread.run_sync(read_files, self.workspace, files, checked)
            now = trio.current_time()
            for target, (_, entry) in zip(targets, pairs, strict=True):
                target.starting = self._starting(entry)
                target.deadline = now + (first_wait if target.starting else wait)
            sync_targets(targets, files, texts, gone, max_open_documents=self.max_open_documents)
            await wait_until_current(targets, settle, self._reports)
            for entry in entries:
                # Waited for once as a starting server: a server that never reports does
                # not cost every later edit the longer wait.
                entry.first_waited = entry.alive
        finally:
            now = trio.current_time()
            for entry in entries:
                entry.users -= 1
                entry.last_used = now
        diagnostics = sorted(
            (d for target in targets for d in collect(target)),
            key=lambda d: (d.path, d.line, d.column, d.source, d.message),
        )
        self._emit(
            "diagnostics",
            DiagnosticsEvent(paths=[str(path) for path in files], diagnostics=diagnostics),
        )
        return EditCheck(
            errors=[d for d in diagnostics if d.severity == "error"],
            coverage=coverage(targets, wait, first_wait),
        )

    def _starting(self, entry: _Entry) -> bool:
        """The entry's server runs and has not yet had its first analysis waited for: it has
        reported on nothing since it started."""
        client = entry.client
        return client is not None and client.alive and client.serial == 0 and not entry.first_waited

    async def _locate(
        self, paths: Iterable[Path]
    ) -> tuple[list[Path], list[tuple[Path, ServerSpec, Path]]]:
        """The files inside the workspace, and (file, spec, root) for each spec that checks one
        of them; in a thread (resolving paths and looking for root markers touch the disk)."""
        return await trio.to_thread.run_sync(self._locate_sync, list(paths))

    def add_project(self, folder: Path) -> None:
        """Also check the files under `folder` (a session's worktree), with servers rooted
        there rather than in the workspace."""
        folder = folder.resolve()
        if folder not in self._projects:
            self._projects.append(folder)

    def _project_of(self, path: Path) -> Path | None:
        """The innermost project folder holding `path` (None: none does)."""
        holding = [p for p in self._projects if p in path.parents or p == path]
        return max(holding, key=lambda p: len(p.parts)) if holding else None

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
            project = self._project_of(path.parent)
            if project is None or path in files:
                continue
            files.append(path)
            for spec in self._specs:
                if spec.handles(path):
                    located.append((path, spec, spec.root_for(path, project)))
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

    # --- starting, crashing, stopping ---------------------------------------------------------

    async def _ensure_running(self, entry: _Entry, budget: float) -> None:
        """Make sure the entry's server runs, starting or restarting it if it may; waits for
        a first backoff of at most `budget` seconds. Never raises for the server's failure."""
        async with entry.lock:
            if self._current(entry):
                return
            previous = entry.client
            if previous is not None and previous.alive:
                # Started under the other answer to "is the workspace trusted?".
                entry.stop_reason = "trust"
                previous.stop()
            if previous is not None and not previous.finished.is_set():
                # It failed a moment ago, or was stopped just above, and is still being
                # reaped: let it finish, so that a crash is recorded (and counted in the
                # backoff) before the restart.
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
            nursery = self._lent.nursery
            if nursery is None:
                return
            trusted = self.trusted()
            spec = entry.spec
            command = entry.command
            if trusted:
                command = await trio.to_thread.run_sync(
                    partial(
                        trusted_command,
                        entry.command,
                        entry.root,
                        self._project_of(entry.root) or self.workspace,
                        path=self.search_path,
                    )
                )
            else:
                form = await trio.to_thread.run_sync(
                    partial(
                        restricted_form,
                        entry.spec,
                        entry.command,
                        self._project_of(entry.root) or self.workspace,
                        path=self.search_path,
                    )
                )
                if isinstance(form, str):
                    if entry.last_error != f"not started: {form}":
                        log.info("language server not started", server=spec.name, reason=form)
                    entry.last_error = f"not started: {form}"
                    return
                spec = form
            entry.trusted = trusted
            entry.restricted = spec is not entry.spec
            restarting = entry.state == "crashed"
            entry.state = "restarting" if restarting else "starting"
            if restarting:
                entry.restarts += 1
            entry.stop_reason = ""
            entry.first_waited = False
            entry.recent.clear()
            client = LspClient(
                command,
                entry.root,
                name=entry.spec.name,
                settings=spec.settings,
                initialization_options=spec.initialization_options,
                log_path=self._log_path(entry),
                env=self.env,
                initialize_timeout=self.initialize_timeout,
                request_timeout=self.request_timeout,
                shutdown_timeout=self.shutdown_timeout,
                on_change=self._reports.wake,
            )
            entry.client = client
            try:
                await nursery.start(self._supervise, entry, client)
            except LspError:
                return  # recorded and reported by _supervise
            entry.state = "running"
            if entry.last_error.startswith("not started: "):
                entry.last_error = ""
            entry.pid = client.pid
            entry.last_used = trio.current_time()
            log.info(
                "language server started",
                server=entry.spec.name,
                root=entry.root,
                pid=entry.pid,
                restarts=entry.restarts,
            )
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
        # A server outlives the turn that started it.
        bind(conn=None, session=None, turn=None)
        try:
            await client.serve(task_status=task_status)
        finally:
            self._ended(entry, client)
            # A call waiting for this server's diagnostics is done with it now, not at its
            # deadline.
            self._reports.wake()

    def _ended(self, entry: _Entry, client: LspClient) -> None:
        if entry.client is not client:
            return
        log.info(
            "language server exited",
            server=entry.spec.name,
            root=entry.root,
            pid=entry.pid,
            state=client.state,
            reason=client.failure or entry.stop_reason,
        )
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
        delay = min(self.max_backoff, self.backoff * 2.0 ** (entry.failures - 1))
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

    def _current(self, entry: _Entry) -> bool:
        """The entry's server runs, started under the workspace's trust as it is now."""
        return entry.alive and entry.trusted == self.trusted()

    def _log_path(self, entry: _Entry) -> Path | None:
        if self.log_dir is None:
            return None
        tag = hashlib.sha256(str(entry.root).encode()).hexdigest()[:8]
        return self.log_dir / f"{entry.spec.name}-{tag}.log"

    def _label(self, entry: _Entry) -> str:
        if entry.root == self.workspace:
            return f"Language server {entry.spec.name}"
        where = (
            display_path(self.workspace, entry.root)
            if self.workspace in entry.root.parents
            else str(entry.root)
        )
        return f"Language server {entry.spec.name} ({where})"

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
