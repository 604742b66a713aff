"""A language-server client over the server's stdio, on trio.

Why our own client, on the project's JSON-RPC machinery and msgspec: there is no well-kept
LSP client library for trio. pygls (2.x) is the well-kept Python LSP library, but its client
(`JsonRPCClient.start_io`) runs on asyncio (`asyncio.create_subprocess_exec`, asyncio tasks),
so using it would bring a second event loop (trio-asyncio) into the daemon; its types
(lsprotocol) are attrs + cattrs, two more dependencies for the dozen messages we need.
multilspy is asyncio too and downloads servers at run time. sansio-lsp-client is sans-IO (so it
would work under trio), but it is built on pydantic, has almost no documentation, and answers
any response it has no model for (pull diagnostics among them) with NotImplementedError. What
this client needs is small: framing (`framing.py`), the JSON-RPC envelope the daemon already
uses for its own protocol (`tether.protocol.jsonrpc`: decode the envelope with `params` and
`result` left raw, then decode those as the structs of `types.py`), the text-sync
notifications and diagnostics. msgspec does the JSON, as everywhere in the daemon.

Lifecycle (`state`):

    starting ──initialize answered──► running ──stop() or cancellation──► stopped
        │                                │
        └── could not start, exited, ────┴──► crashed      (`failure` says why)
            closed its output, sent a broken frame,
            or did not answer initialize in time

Rules:
- `serve` owns the process (its own process group, see `process.py`) and three I/O tasks:
  the reader (dispatches every message as it arrives), the writer (drains a bounded outbox
  into the server's stdin) and the exit watcher. Senders never block: a message is queued
  with `send_nowait`, so answering a server request from the reader cannot deadlock against a
  server that is itself blocked writing to us. A full outbox means the server stopped
  reading: it is treated as crashed.
- The I/O tasks run in a shielded scope that only `serve` cancels, so a cancelled `serve`
  can still say `shutdown`/`exit` (bounded by `shutdown_timeout`) before the group is killed.
- Requests in flight (ids, the outbox, answers matched to them) are `requests.py`'s.
  Every request has a timeout; a request that times out is cancelled with `$/cancelRequest`.
  When the server goes away every pending request fails with ServerGone at once.
- Server requests are answered at once: `workspace/configuration` with the configured setting
  for each item's section (null when none), `workspace/workspaceFolders` with the root,
  `client/registerCapability`, `client/unregisterCapability`, `window/workDoneProgress/create`,
  `window/showMessageRequest` and `workspace/diagnostic/refresh` with null (registrations are
  recorded), `workspace/applyEdit` with "not applied"; anything else with MethodNotFound.
- Diagnostics, pushed (`textDocument/publishDiagnostics`) or pulled (`textDocument/diagnostic`,
  for servers that advertise `diagnosticProvider` or register it later, as basedpyright does
  right after `initialized`; such servers then stop pushing), are kept per URI as a
  `DiagnosticReport` with a serial number. `on_change()` is called on every new report and
  every registration change, so a waiter can look again.
- Text sync (`documents.py`) is whole-document (valid whatever sync kind the server
  prefers); versions are tracked per URI, starting at 1 on `didOpen`.

Errors: see `tether.daemon.lsp.errors`.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import msgspec
import trio

from tether.daemon.lsp.documents import DiagnosticReport, Document, OpenDocuments
from tether.daemon.lsp.errors import (
    FramingError,
    LspError,
    RequestTimeout,
    ResponseError,
    ServerGone,
)
from tether.daemon.lsp.framing import MessageReader
from tether.daemon.lsp.process import reap_server, spawn_server
from tether.daemon.lsp.requests import Requests
from tether.daemon.lsp.types import (
    ConfigurationParams,
    DocumentDiagnosticReport,
    InitializeResult,
    PublishDiagnosticsParams,
    RegistrationParams,
    ServerCapabilities,
    ServerInfo,
    UnregistrationParams,
    decode_as,
    path_to_uri,
)
from tether.daemon.procs.env import command_env
from tether.protocol.jsonrpc import FrameError, decode_envelope, error_frame, result_frame
from tether.protocol.version import __version__

T = TypeVar("T")

ClientState = Literal["starting", "running", "stopped", "crashed"]

INITIALIZE_TIMEOUT = 10.0
REQUEST_TIMEOUT = 5.0
SHUTDOWN_TIMEOUT = 2.0
METHOD_NOT_FOUND = -32601
REQUEST_CANCELLED = -32800

CLIENT_CAPABILITIES: dict[str, object] = {
    "general": {"positionEncodings": ["utf-16"]},
    "textDocument": {
        "synchronization": {
            "dynamicRegistration": False,
            "didSave": True,
            "willSave": False,
            "willSaveWaitUntil": False,
        },
        "publishDiagnostics": {
            "relatedInformation": False,
            "versionSupport": True,
            "codeDescriptionSupport": True,
            "tagSupport": {"valueSet": [1, 2]},
        },
        "diagnostic": {"dynamicRegistration": True, "relatedDocumentSupport": False},
        "definition": {"linkSupport": True},
        "typeDefinition": {"linkSupport": True},
        "references": {},
        # Markdown first: in plain text TypeScript runs a signature and its doc comment
        # together on one line; in Markdown it fences the signature.
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        "rename": {"prepareSupport": False},
    },
    "workspace": {
        "configuration": True,
        "workspaceFolders": True,
        "didChangeConfiguration": {"dynamicRegistration": True},
        "didChangeWatchedFiles": {"dynamicRegistration": True, "relativePatternSupport": False},
        "diagnostics": {"refreshSupport": True},
        "symbol": {},
        "workspaceEdit": {"documentChanges": True},
    },
    "window": {"workDoneProgress": False, "showMessage": {}},
}
"""What the client tells servers it supports: document sync with save, pushed and pulled
diagnostics, configuration and watched-file registrations, and the questions the code tools
ask (definitions, references, hover, symbols, rename: `navigation.py`). The server never
applies an edit itself (`workspace/applyEdit` is refused): a rename's edit is applied by
tether, as an edit the permission gate has seen."""


def _lookup_setting(settings: Mapping[str, object], section: str | None) -> object:
    """The value for a configuration section: an exact key, else a dotted walk into nested
    tables (`basedpyright.analysis` in `{"basedpyright": {"analysis": {...}}}`)."""
    if section is None:
        return dict(settings) if settings else None
    if section in settings:
        return settings[section]
    node: object = settings
    for part in section.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]  # pyright: ignore[reportUnknownVariableType]
    return node  # pyright: ignore[reportUnknownVariableType]


class LspClient:
    """One language-server process and the conversation with it.

    Use: `await nursery.start(client.serve)`; then `sync`, `save`, `close`, `pull_diagnostics`,
    `request`, `notify`; read `reports`; `stop()` ends it politely.
    """

    def __init__(
        self,
        command: Sequence[str],
        root: Path,
        *,
        name: str = "",
        settings: Mapping[str, object] | None = None,
        initialization_options: object = None,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        initialize_timeout: float = INITIALIZE_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        if not command:
            raise ValueError("empty server command")
        self.command = list(command)
        self.root = root
        self.name = name or Path(command[0]).name
        self.settings: Mapping[str, object] = settings or {}
        self.initialization_options = initialization_options
        self.log_path = log_path
        self.env = dict(env) if env is not None else command_env()
        self.initialize_timeout = initialize_timeout
        self.request_timeout = request_timeout
        self.shutdown_timeout = shutdown_timeout
        self.on_change = on_change
        """Called (synchronously) whenever a report or a registration changes."""

        self.state: ClientState = "starting"
        self.failure: str | None = None
        """Why the server stopped when nobody asked it to (None while it runs, or after a
        requested stop)."""
        self.pid: int | None = None
        self.capabilities = ServerCapabilities()
        self.server_info: ServerInfo | None = None
        self.registrations: dict[str, str] = {}
        """Dynamic registrations: id → method."""
        self._open = OpenDocuments(self.notify, self._changed)
        self.started_at: float | None = None

        self.finished = trio.Event()
        """Set when `serve` is done: the process group is gone and `state` is final."""
        self._ended = trio.Event()
        """Set when the server is gone or a stop was requested: `serve` wakes up."""
        self._gone = trio.Event()
        self._exited = trio.Event()
        """The process has exited and `_watch_exit` has said how."""
        self._stopping = False
        self._requests = Requests(
            self.name,
            gone=self._gone,
            why_gone=lambda: self.failure or "is not running",
            overflow=self._fail,
        )

    # --- lifetime -----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the server, initialize it, and run it until `stop()` or until it fails.

        Before `task_status.started()` it raises ServerGone when the server cannot be
        started, exits, or does not answer `initialize` within `initialize_timeout`. After
        that it never raises for the server's failures: it returns, with `state` "crashed"
        and `failure` saying why, or "stopped" after `stop()`.

        Cancellation stops the server: `shutdown` and `exit` when it is running (shielded,
        bounded by `shutdown_timeout`), then its whole process group is killed; then the
        cancellation propagates.
        """
        try:
            process = await spawn_server(self.command, self.root, self.env, self.log_path)
        except OSError as exc:
            self._fail(f"cannot start {self.command[0]}: {exc}")
            self.state = "crashed"
            self.finished.set()
            raise ServerGone(self.failure) from exc
        self.pid = process.pid
        failure: ServerGone | None = None
        io_scope = trio.CancelScope(shield=True)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._run_io, process, io_scope)
                try:
                    await self._initialize()
                except ServerGone as exc:
                    # Raised once the group is reaped, and from outside the nursery (which
                    # would wrap it in an ExceptionGroup).
                    failure = exc
                else:
                    self.state = "running"
                    self.started_at = trio.current_time()
                    task_status.started()
                    await self._ended.wait()
                finally:
                    with trio.CancelScope(shield=True):
                        await self._shutdown_politely()
                    io_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await reap_server(process)
            self.state = "crashed" if self.failure is not None else "stopped"
            self._requests.fail_pending(self.failure or "the server was stopped")
            self.finished.set()
        if failure is not None:
            raise failure

    def stop(self) -> None:
        """Ask `serve` to shut the server down politely and return."""
        self._stopping = True
        self._ended.set()

    @property
    def alive(self) -> bool:
        return self.state == "running" and not self._gone.is_set()

    async def _initialize(self) -> None:
        params: dict[str, object] = {
            "processId": os.getpid(),
            "clientInfo": {"name": "tether", "version": __version__},
            "rootUri": path_to_uri(self.root),
            "rootPath": str(self.root),
            "workspaceFolders": [{"uri": path_to_uri(self.root), "name": self.root.name}],
            "capabilities": CLIENT_CAPABILITIES,
            "trace": "off",
        }
        if self.initialization_options is not None:
            params["initializationOptions"] = self.initialization_options
        try:
            result = await self._requests.call(
                "initialize", params, InitializeResult, self.initialize_timeout
            )
        except RequestTimeout:
            self._fail(f"did not answer initialize within {self.initialize_timeout:g} s")
            raise ServerGone(self.failure) from None
        except (ResponseError, msgspec.ValidationError) as exc:
            self._fail(f"initialize failed: {exc}")
            raise ServerGone(self.failure) from exc
        except ServerGone:
            self.state = "crashed"
            raise
        self.capabilities = result.capabilities
        self.server_info = result.serverInfo
        # `{}`, not null: gopls rejects a null `initialized`.
        self.notify("initialized", {})

    async def _shutdown_politely(self) -> None:
        self._stopping = True
        if self._gone.is_set() or self.state != "running":
            return
        with trio.move_on_after(self.shutdown_timeout):
            try:
                await self._requests.call("shutdown", None, object, self.shutdown_timeout)
            except LspError:
                return
            self.notify("exit")
            await self._gone.wait()

    # --- I/O tasks ----------------------------------------------------------------------------

    async def _run_io(self, process: trio.Process, scope: trio.CancelScope) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_loop, process.stdout)
                nursery.start_soon(self._write_loop, process.stdin)
                nursery.start_soon(self._watch_exit, process)

    async def _read_loop(self, stream: trio.abc.ReceiveStream) -> None:
        reader = MessageReader(stream)
        try:
            while True:
                body = await reader.receive()
                if body is None:
                    await self._pipe_ended("closed its output")
                    return
                self._dispatch(body)
        except FramingError as exc:
            self._fail(f"sent a broken message: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self._pipe_ended("closed its output")

    async def _write_loop(self, stream: trio.abc.SendStream) -> None:
        try:
            async for data in self._requests.outbox:
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self._pipe_ended("closed its input")

    async def _pipe_ended(self, reason: str) -> None:
        """A pipe to the server ended. Usually the process is exiting: give the exit watcher a
        moment to say how first (an exit status, a signal, tells more than the end of a pipe;
        whichever of the two pipes notices first must not hide it)."""
        with trio.move_on_after(1.0):
            await self._exited.wait()
        self._fail(reason)

    async def _watch_exit(self, process: trio.Process) -> None:
        code = await process.wait()
        how = f"signal {-code}" if code < 0 else f"status {code}"
        self._fail(f"exited with {how}")
        self._exited.set()

    def _fail(self, reason: str) -> None:
        """The server is gone (or must be treated as gone): record why, wake everyone."""
        if not self._stopping and self.failure is None:
            self.failure = reason
        self._gone.set()
        self._ended.set()
        self._requests.fail_pending(reason)

    # --- sending ------------------------------------------------------------------------------

    def notify(self, method: str, params: object = None) -> None:
        """Send a notification (queued; never blocks). Raises ServerGone."""
        self._requests.notify(method, params)

    async def request(self, method: str, params: object, result_type: type[T]) -> T:
        """Send a request and wait for its result, decoded as `result_type`.

        Raises RequestTimeout after `request_timeout` seconds, ResponseError, ServerGone.
        Callers that need less time wrap the call in a cancel scope: cancellation, like a
        timeout, withdraws the request with `$/cancelRequest`, and then propagates."""
        return await self._requests.call(method, params, result_type, self.request_timeout)

    # --- receiving ----------------------------------------------------------------------------

    def _dispatch(self, body: bytes) -> None:
        try:
            envelope = decode_envelope(body)
        except FrameError:
            return  # well framed but not JSON-RPC: nothing to answer, nothing to learn
        if envelope.method is None:
            self._requests.answer(envelope)
            return
        # An absent id makes a notification; `"id": null` is a request and is answered.
        request_id = envelope.id
        try:
            if isinstance(request_id, msgspec.UnsetType):
                self._on_notification(envelope.method, envelope.params)
            else:
                result = self._on_request(envelope.method, envelope.params)
                self._requests.send(result_frame(request_id, result))
        except msgspec.ValidationError as exc:
            if not isinstance(request_id, msgspec.UnsetType):
                self._requests.send(error_frame(request_id, -32602, f"invalid params: {exc}"))
        except _MethodNotFound:
            assert not isinstance(request_id, msgspec.UnsetType)
            self._requests.send(error_frame(request_id, METHOD_NOT_FOUND, f"{envelope.method}?"))
        except ServerGone:
            pass

    def _on_notification(self, method: str, params: msgspec.Raw) -> None:
        if method == "textDocument/publishDiagnostics":
            published = decode_as(params, PublishDiagnosticsParams)
            self._open.store(published.uri, published.diagnostics, published.version, pulled=False)
        # window/logMessage, window/showMessage, $/progress, telemetry/event: not needed.

    def _on_request(self, method: str, params: msgspec.Raw) -> object:
        match method:
            case "workspace/configuration":
                items = decode_as(params, ConfigurationParams).items
                return [_lookup_setting(self.settings, item.section) for item in items]
            case "client/registerCapability":
                for registration in decode_as(params, RegistrationParams).registrations:
                    self.registrations[registration.id] = registration.method
                self._changed()
                return None
            case "client/unregisterCapability":
                for registration in decode_as(params, UnregistrationParams).unregisterations:
                    self.registrations.pop(registration.id, None)
                self._changed()
                return None
            case "workspace/workspaceFolders":
                return [{"uri": path_to_uri(self.root), "name": self.root.name}]
            case (
                "window/workDoneProgress/create"
                | "window/showMessageRequest"
                | "workspace/diagnostic/refresh"
            ):
                return None
            case "workspace/applyEdit":
                return {"applied": False, "failureReason": "this client does not apply edits"}
            case _:
                raise _MethodNotFound

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- documents ----------------------------------------------------------------------------

    @property
    def documents(self) -> Mapping[str, Document]:
        """Open documents by URI."""
        return self._open.documents

    @property
    def reports(self) -> Mapping[str, DiagnosticReport]:
        """The latest diagnostics by URI."""
        return self._open.reports

    @property
    def serial(self) -> int:
        """The serial of the latest report (0: none yet)."""
        return self._open.serial

    def sync(self, uri: str, language_id: str, text: str) -> bool:
        """Make the server's copy of a document `text`: `didOpen` the first time, `didChange`
        (whole content, next version) when it differs. Returns whether anything was sent.
        Raises ServerGone."""
        return self._open.sync(uri, language_id, text)

    def save(self, uri: str) -> None:
        """`didSave` for an open document (with its text when the server asks for it)."""
        self._open.save(uri, include_text=self._save_includes_text())

    def close(self, uri: str) -> None:
        """`didClose`, and forget the document and its diagnostics."""
        self._open.close(uri)

    def _save_includes_text(self) -> bool:
        sync = self.capabilities.textDocumentSync
        if isinstance(sync, dict):
            save = sync.get("save")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(save, dict):
                return bool(save.get("includeText"))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        return False

    def notify_files_changed(self, changes: Sequence[tuple[str, int]]) -> None:
        """`workspace/didChangeWatchedFiles` for (uri, type) pairs (1 created, 2 changed,
        3 deleted), when the server registered for file events."""
        if changes and "workspace/didChangeWatchedFiles" in self.registrations.values():
            self.notify(
                "workspace/didChangeWatchedFiles",
                {"changes": [{"uri": uri, "type": kind} for uri, kind in changes]},
            )

    # --- pulled diagnostics -------------------------------------------------------------------

    @property
    def pulls_diagnostics(self) -> bool:
        """The server answers `textDocument/diagnostic` (advertised or registered)."""
        return self.capabilities.diagnosticProvider is not None or (
            "textDocument/diagnostic" in self.registrations.values()
        )

    async def pull_diagnostics(self, uri: str) -> None:
        """Ask for a document's diagnostics and store the answer as its report, marked with
        the document version it was asked for.

        Raises RequestTimeout, ResponseError, ServerGone. Cancellation withdraws the request."""
        document = self.documents.get(uri)
        version = document.version if document is not None else None
        report = await self.request(
            "textDocument/diagnostic", {"textDocument": {"uri": uri}}, DocumentDiagnosticReport
        )
        if report.kind == "unchanged" and uri in self.reports:
            self._open.store(uri, self.reports[uri].items, version, pulled=True)
        else:
            self._open.store(uri, report.items, version, pulled=True)

    def statistics(self) -> dict[str, int]:
        return {
            "open_documents": len(self.documents),
            **self._requests.statistics(),
        }


class _MethodNotFound(Exception):
    pass
