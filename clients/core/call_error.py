"""The error a thin client raises when the daemon answers a call with a JSON-RPC error.

Standard library only: the client's first requests (`tether.clients.core.prelude`) raise it before
msgspec is imported."""


class CallError(Exception):
    """The daemon answered a call with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{method}: {message} ({code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data
        """The error's `data`, as decoded JSON (docs/protocol.md names it per code)."""
