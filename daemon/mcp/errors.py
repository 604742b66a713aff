"""What can go wrong talking to an MCP server.

    McpError                 every failure of this package; its message is for the model
    ├── McpUnavailable       the server is not running: not started, crashed, exited, refused
    │   ├── McpHttpStatus    an HTTP error status whose body is no JSON-RPC answer to the request
    │   └── McpNotDelivered  the request never reached the server (no connection), or the server
    │       │                refused the session it carried: sending it again is safe
    │       └── McpSessionLost  the server no longer knows the session (404, or 400 naming it)
    ├── McpTimeout           no answer within the call's timeout (the request was cancelled)
    ├── McpProtocolError     the server said something that is not MCP (bad JSON, no result)
    └── McpRemoteError       the server answered the request with a JSON-RPC error

Transport failures (OSError, httpx errors) are mapped to these at the transport, so the
client and the pool see only this hierarchy.
"""


class McpError(Exception):
    """A failed exchange with an MCP server, explained."""


class McpUnavailable(McpError):
    pass


class McpHttpStatus(McpUnavailable):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class McpNotDelivered(McpUnavailable):
    pass


class McpSessionLost(McpNotDelivered):
    pass


class McpTimeout(McpError):
    pass


class McpProtocolError(McpError):
    pass


class McpRemoteError(McpError):
    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"the server answered with error {code}: {message}")
        self.code = code
        self.data = data
