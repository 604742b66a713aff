"""Diagnostics after an edit: sending files to their servers, waiting until each has spoken
about the version it was sent, and reading what it said.

The pool (`pool.py`) starts the servers and decides which serve a file; this module does the
rest of one `check_after_edit` call, for (server, file) pairs, the `Target`s:

1. `sync_targets` sends each file's content as it is on disk: `didOpen` the first time, else
   `didChange` with the next version when it differs, then `didSave`; a file that is gone is
   closed. Servers that registered for file events also get `workspace/didChangeWatchedFiles`
   for every path in the call (so ruff sees an edited `pyproject.toml`). A text the server
   already has and has spoken about needs no wait.
2. `wait_until_current` waits, until each pair's deadline, for every pair to be current: a
   pulled result (servers with `diagnosticProvider` are asked with `textDocument/diagnostic`),
   or a push for the version sent. A push without a version cannot say it is current: once
   every pair has had a report since the sync, the wait ends `settle` seconds after the last
   change. (Ending the wait `settle` after any change would let a fast linter's answer cut
   off the type checker's.) A server that goes away is done: its diagnostics are just
   missing. The pool gives a pair whose server is still starting (it has reported on nothing
   yet) a later deadline than the others: a cold server's first analysis takes seconds.
3. `collect` turns a pair's latest report into `Diagnostic`s, with 1-based lines and columns in
   code points, whatever unit the server counts `character` in; `coverage` says which servers
   spoke about the files and which did not, and why.
"""

import contextlib
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

import msgspec
import trio

from tether.daemon.beneath import read_beneath
from tether.daemon.lsp.client import LspClient
from tether.daemon.lsp.errors import LspError, ServerGone
from tether.daemon.lsp.servers import ServerSpec
from tether.daemon.lsp.types import LspDiagnostic, path_to_uri
from tether.protocol.events import Diagnostic

Severity = Literal["error", "warning", "information", "hint"]
"""`Diagnostic`s are the protocol's (`diagnostics_reported` carries them), their `path`
absolute here; `report.wire_diagnostics` makes it workspace-relative for the clients. Lines
and columns are 1-based, columns in characters (code points) whatever unit the server counts
in; `source` is the server's own label (`basedpyright`, `Ruff`), else the spec's name."""

MAX_SYNC_BYTES = 4 * 1024 * 1024
"""Larger files are not sent to servers."""

_SEVERITIES: dict[int, Severity] = {1: "error", 2: "warning", 3: "information", 4: "hint"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class ServerSlot(Protocol):
    """A server of the pool as a check sees it: its client (None, or not alive, when it is not
    running), its spec and root, and its open documents."""

    client: LspClient | None
    spec: ServerSpec
    root: Path
    recent: dict[str, None]
    """Open documents' URIs, least recently synced first."""
    last_error: str
    """Why it is not running, when it is not ("" when nobody knows)."""


class Target:
    """One (server, file) pair of a diagnostics call."""

    def __init__(self, slot: ServerSlot, path: Path) -> None:
        self.slot = slot
        self.path = path
        self.uri = path_to_uri(path)
        self.client: LspClient | None = None
        self.baseline = 0
        """The client's report serial before the sync: later reports are fresh."""
        self.version: int | None = None
        self.fresh = False
        self.done = False
        self.pulling = False
        self.deadline = math.inf
        """When the wait for this pair ends (the pool sets it)."""
        self.starting = False
        """Its server had reported on nothing yet when the call began."""
        self.skipped = False
        """The file was not sent (unreadable, too large, gone): there is nothing to answer."""


class Unanswered(msgspec.Struct, frozen=True):
    """A server that did not speak about the files of a call, and why."""

    server: str
    reason: str


class Coverage(msgspec.Struct, frozen=True, kw_only=True):
    """Which servers spoke about the files of a call (`checked`: about every file they were
    sent), and which did not (a server counts once, by name, its first reason kept)."""

    checked: list[str] = []
    unanswered: list[Unanswered] = []


class ReportSignal:
    """Wakes whoever waits for diagnostics when any server's reports or registrations change
    (clients call `wake` as their `on_change`)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    @property
    def next_change(self) -> trio.Event:
        """Set at the next `wake`."""
        return self._event

    def wake(self) -> None:
        self._event.set()
        self._event = trio.Event()


def read_files(
    root: Path, files: list[Path], checked: list[Path]
) -> tuple[dict[Path, str], set[Path]]:
    """The text of each file to check (unreadable and oversized ones are left out), and which
    of `files` are gone. A file inside `root` (the resolved workspace) is read from
    descriptors opened beneath it, never through a symlink (`tether.daemon.beneath`), so a
    folder swapped for one cannot send a file from elsewhere to a language server. Blocking:
    run it in a thread."""
    texts: dict[Path, str] = {}
    gone = {path for path in files if not path.exists()}
    for path in checked:
        try:
            if path == root or root in path.parents:
                data, _ = read_beneath(root, path, limit=MAX_SYNC_BYTES)
            elif path.stat().st_size <= MAX_SYNC_BYTES:
                data = path.read_bytes()
            else:
                continue
            texts[path] = data.decode("utf-8", errors="replace")
        except FileNotFoundError:
            gone.add(path)
        except OSError:
            pass
    return texts, gone


def sync_targets(
    targets: list[Target],
    files: list[Path],
    texts: Mapping[Path, str],
    gone: set[Path],
    *,
    max_open_documents: int,
) -> None:
    """Send every target's content (no checkpoints: concurrent calls cannot interleave), and
    close the least recently checked documents beyond `max_open_documents` per server."""
    for slot in {id(t.slot): t.slot for t in targets}.values():
        client = slot.client
        if client is not None and client.alive:
            events = [
                (path_to_uri(path), 3 if path in gone else 2)
                for path in files
                if slot.root == path or slot.root in path.parents
            ]
            with contextlib.suppress(ServerGone):
                client.notify_files_changed(events)
    for target in targets:
        client = target.slot.client
        if client is None or not client.alive or target.path not in texts:
            if client is not None and client.alive:
                target.skipped = True
                if target.path in gone:
                    with contextlib.suppress(ServerGone):
                        client.close(target.uri)
                    target.slot.recent.pop(target.uri, None)
            target.done = True
            continue
        text = texts[target.path]
        try:
            target.client = client
            target.baseline = client.serial
            changed = client.sync(target.uri, target.slot.spec.language_for(target.path), text)
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
            keep = {t.uri for t in targets if t.slot is target.slot}
            touch_document(target, keep, max_open_documents)
        except ServerGone:
            target.done = True


def touch_document(target: Target, keep: set[str], max_open_documents: int) -> None:
    """Mark the target's document the most recently used of its server, and close the least
    recently used beyond `max_open_documents` (never one in `keep`)."""
    recent = target.slot.recent
    recent.pop(target.uri, None)
    recent[target.uri] = None
    client = target.client
    assert client is not None
    while len(recent) > max_open_documents:
        oldest = next(iter(recent))
        if oldest in keep:
            break
        del recent[oldest]
        client.close(oldest)


async def wait_until_current(targets: list[Target], settle: float, signal: ReportSignal) -> None:
    """Wait until every target is current (see the module's rules), or until its own
    deadline. Pulls run in the background and are withdrawn when the wait ends. Cancellation
    propagates; requests in flight are cancelled."""
    waiting = [t for t in targets if not t.done]
    if not waiting:
        return
    last_change: float | None = None
    async with trio.open_nursery() as nursery:
        while True:
            changed = signal.next_change
            for target in waiting:
                if _check(target):
                    last_change = trio.current_time()
                client = target.client
                if target.done or client is None:
                    continue
                if not client.alive:
                    target.done = True
                elif client.pulls_diagnostics and not target.pulling:
                    target.pulling = True
                    nursery.start_soon(_pull, target, client, signal)
            now = trio.current_time()
            pending = [t for t in waiting if not t.done and t.deadline > now]
            if not pending:
                break
            until = max(t.deadline for t in pending)
            if last_change is not None and all(t.fresh for t in pending):
                until = min(until, last_change + settle)
            if now >= until:
                break
            with trio.move_on_at(until):
                await changed.wait()
        nursery.cancel_scope.cancel()


def _check(target: Target) -> bool:
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


async def _pull(target: Target, client: LspClient, signal: ReportSignal) -> None:
    try:
        with trio.move_on_at(target.deadline):
            await client.pull_diagnostics(target.uri)
    except LspError:
        pass
    finally:
        # Answered, or not in time, or the server is gone: nothing more from it this time.
        _check(target)
        target.done = True
        target.pulling = False
        signal.wake()


def coverage(targets: list[Target], wait: float, first_wait: float) -> Coverage:
    """Which servers spoke about the targets' files after the wait (`wait` seconds, or
    `first_wait` for servers still starting), and why the others did not."""
    checked: dict[str, None] = {}
    unanswered: dict[str, str] = {}
    for target in targets:
        if target.skipped:
            continue
        name = target.slot.spec.name
        if target.fresh:
            checked.setdefault(name, None)
            continue
        client = target.client
        if client is None:
            reason = target.slot.last_error or "not running"
        elif not client.alive:
            reason = "stopped while checking"
        elif target.starting:
            reason = f"still starting: no answer within {first_wait:g} s"
        else:
            reason = f"no answer within {wait:g} s"
        unanswered.setdefault(name, reason)
    return Coverage(
        checked=[name for name in checked if name not in unanswered],
        unanswered=[Unanswered(name, reason) for name, reason in unanswered.items()],
    )


def collect(target: Target) -> list[Diagnostic]:
    """The target's diagnostics (all severities), if its server spoke since the sync."""
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
                source=item.source or target.slot.spec.name,
            )
        )
    return result


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
