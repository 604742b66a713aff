"""The documents open on one language server, kept in sync whole (versions per URI, from 1 at
`didOpen`), and the diagnostics the server reported for them, each report numbered."""

from collections.abc import Callable

import msgspec

from tether.daemon.lsp.types import LspDiagnostic


class DiagnosticReport(msgspec.Struct, frozen=True, kw_only=True):
    """The server's latest diagnostics for one document."""

    uri: str
    items: list[LspDiagnostic]
    version: int | None
    """The document version they were computed for: as the server says for a push (it may
    not), the version asked about for a pull."""
    serial: int
    """Increases with every report the client receives, across all documents."""
    pulled: bool
    """Answered a `textDocument/diagnostic` request (so it is current when it arrives)."""


class Document(msgspec.Struct, kw_only=True):
    language_id: str
    version: int
    text: str
    synced_serial: int
    """The report serial when this version was sent: a later report describes it, even a
    push that carries no version."""


class OpenDocuments:
    """What the server was told of each document, and what it reported back."""

    def __init__(
        self, notify: Callable[[str, object], None], on_report: Callable[[], None]
    ) -> None:
        """`notify` sends a notification to the server (raising ServerGone); `on_report` is
        called on every new report."""
        self._notify = notify
        self._on_report = on_report
        self.documents: dict[str, Document] = {}
        """Open documents by URI."""
        self.reports: dict[str, DiagnosticReport] = {}
        self.serial = 0

    def sync(self, uri: str, language_id: str, text: str) -> bool:
        """See `LspClient.sync`."""
        document = self.documents.get(uri)
        if document is None:
            self._notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": uri,
                        "languageId": language_id,
                        "version": 1,
                        "text": text,
                    }
                },
            )
            self.documents[uri] = Document(
                language_id=language_id, version=1, text=text, synced_serial=self.serial
            )
            return True
        if document.text == text:
            return False
        document.version += 1
        document.text = text
        document.synced_serial = self.serial
        self._notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": document.version},
                "contentChanges": [{"text": text}],
            },
        )
        return True

    def save(self, uri: str, *, include_text: bool) -> None:
        """`didSave` for an open document (with its text when `include_text`)."""
        document = self.documents.get(uri)
        if document is None:
            return
        params: dict[str, object] = {"textDocument": {"uri": uri}}
        if include_text:
            params["text"] = document.text
        self._notify("textDocument/didSave", params)

    def close(self, uri: str) -> None:
        """`didClose`, and forget the document and its diagnostics."""
        if self.documents.pop(uri, None) is None:
            return
        self.reports.pop(uri, None)
        self._notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def store(
        self, uri: str, items: list[LspDiagnostic], version: int | None, *, pulled: bool
    ) -> None:
        """Keep a report as the document's latest, with the next serial number."""
        self.serial += 1
        self.reports[uri] = DiagnosticReport(
            uri=uri, items=items, version=version, serial=self.serial, pulled=pulled
        )
        self._on_report()
