"""What can go wrong talking to a language server.

    LspError                  base of everything below
    ├── FramingError          the server's output is not Content-Length framed JSON-RPC
    ├── ServerGone            the server exited, closed its output, or was stopped
    ├── RequestTimeout        a request got no answer in time (the request is cancelled)
    ├── ResponseError         the server answered a request with a JSON-RPC error
    └── Unavailable           no server can answer about a file (not installed, not
                              started, crashed); the message is written for the model

The pool never lets the others reach a turn: a server that fails is marked crashed, reported
through the pool's `on_event`, and its diagnostics are simply missing from the report.
"""


class LspError(Exception):
    """Base class of the language-server errors."""


class FramingError(LspError):
    """The byte stream from the server cannot be read as framed messages."""


class ServerGone(LspError):
    """The server is not running any more (it exited, crashed, or was stopped)."""


class RequestTimeout(LspError):
    """No answer within the request's timeout."""


class ResponseError(LspError):
    """The server answered with a JSON-RPC error object."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message


class Unavailable(LspError):
    """No server can answer a question about a file; the message says why and what would."""
