"""Error codes clients can see: the JSON-RPC 2.0 set plus tether's own, all in one closed table.

    JSON-RPC            -32700 parse error, -32600 invalid request, -32601 method not found,
                        -32602 invalid params, -32603 internal error
    LSP                 -32800 request cancelled (by the client's `$/cancelRequest`)
    tether (-32000..)   the daemon's own conditions, listed in `ErrorCode`; the message says what
                        happened and the optional `data` carries structured detail.

Any request can get the `GENERIC_ERRORS`; each method declares the others it can return
(`errors=` in `tether.protocol.methods`), and `ERROR_DATA` (in `tether.protocol.error_data`)
gives the shape of `data` for the codes that carry one. A client treats a code it does not
know as a failure of the request, with `message` to show.

`RpcError` is the exception the daemon raises inside a handler; the dispatcher turns it into an
error response. Anything else escaping a handler becomes -32603 with no traceback on the wire.
"""

import enum

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:  # msgspec is not needed to name an error code (the CLI starts without it)
    from tether.protocol.base import Wire


class ErrorCode(enum.IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    REQUEST_CANCELLED = -32800

    NOT_INITIALIZED = -32002
    ALREADY_INITIALIZED = -32003
    UNSUPPORTED_PROTOCOL = -32004
    SESSION_NOT_FOUND = -32010
    NOT_ATTACHED = -32012
    NOT_CONTROLLER = -32013
    NO_RUNNING_TURN = -32014
    SESSION_BUSY = -32015
    APPROVAL_NOT_FOUND = -32020
    APPROVAL_RESOLVED = -32021
    NOTHING_TO_UNDO = -32022
    PROCESS_NOT_FOUND = -32023
    MODEL_UNAVAILABLE = -32024
    COMPACTION_FAILED = -32025
    MCP_SERVER_NOT_FOUND = -32026
    SHUTTING_DOWN = -32030
    IMAGES_UNSUPPORTED = -32027
    # sessions people manage: fork, search
    TURN_NOT_FOUND = -32011
    SEARCH_QUERY_INVALID = -32028
    # worktree sessions
    WORKTREE_FAILED = -32050
    MERGE_CONFLICT = -32051
    WORKTREE_UNMERGED = -32052


ERROR_DOCS: dict[ErrorCode, str] = {
    ErrorCode.PARSE_ERROR: "The frame is not valid JSON.",
    ErrorCode.INVALID_REQUEST: "Not a JSON-RPC 2.0 request (batches are not supported).",
    ErrorCode.METHOD_NOT_FOUND: "No such method.",
    ErrorCode.INVALID_PARAMS: "The params do not fit the method; the message names the field.",
    ErrorCode.INTERNAL_ERROR: "The daemon failed unexpectedly; the daemon log has the details.",
    ErrorCode.REQUEST_CANCELLED: (
        "The client cancelled the request (`$/cancelRequest`) before it was done."
    ),
    ErrorCode.NOT_INITIALIZED: "`initialize` must be the first request on a connection.",
    ErrorCode.ALREADY_INITIALIZED: "`initialize` was already sent on this connection.",
    ErrorCode.UNSUPPORTED_PROTOCOL: "The client's protocol version is newer than the daemon's.",
    ErrorCode.SESSION_NOT_FOUND: "No session with that id in this workspace.",
    ErrorCode.NOT_ATTACHED: "The connection is not attached to that session.",
    ErrorCode.NOT_CONTROLLER: "Only a controller may do this; the connection attached as observer.",
    ErrorCode.NO_RUNNING_TURN: "The session has no running turn.",
    ErrorCode.SESSION_BUSY: "A turn is running; try again when it has ended.",
    ErrorCode.APPROVAL_NOT_FOUND: "No pending or past approval with that id in the session.",
    ErrorCode.APPROVAL_RESOLVED: "Someone answered first; `data` says who and how.",
    ErrorCode.NOTHING_TO_UNDO: "The turn changed no files, or was already undone.",
    ErrorCode.PROCESS_NOT_FOUND: "No background process with that id.",
    ErrorCode.MODEL_UNAVAILABLE: "The model server could not be asked; the message says why.",
    ErrorCode.COMPACTION_FAILED: (
        "The model's summary was empty or unusable; nothing was compacted."
    ),
    ErrorCode.MCP_SERVER_NOT_FOUND: "No MCP server of that name is configured for the workspace.",
    ErrorCode.SHUTTING_DOWN: "The daemon is shutting down and takes no new work.",
    ErrorCode.IMAGES_UNSUPPORTED: (
        "The message carries images and the session's model takes none; nothing was sent."
    ),
    ErrorCode.TURN_NOT_FOUND: "No turn with that id in the session.",
    ErrorCode.SEARCH_QUERY_INVALID: (
        "The search query is not valid FTS5 syntax (only with `syntax: true`); the message"
        " says where."
    ),
    ErrorCode.WORKTREE_FAILED: (
        "git could not do it (the workspace is not in a git repository, its config names "
        "programs git would run, the session has no worktree, …); the message says why."
    ),
    ErrorCode.MERGE_CONFLICT: (
        "The session's changes conflict with the workspace's branch; nothing was changed."
        " `data.files` names the files."
    ),
    ErrorCode.WORKTREE_UNMERGED: (
        "The session's worktree holds changes that are not merged; merge them or delete with"
        " `force`."
    ),
}


GENERIC_ERRORS: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.PARSE_ERROR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.METHOD_NOT_FOUND,
        ErrorCode.INVALID_PARAMS,
        ErrorCode.INTERNAL_ERROR,
        ErrorCode.NOT_INITIALIZED,
        ErrorCode.REQUEST_CANCELLED,
    }
)
"""The errors any request may get, whatever its method (`NOT_INITIALIZED`: any but
`initialize`; `REQUEST_CANCELLED`: any the client cancelled with `$/cancelRequest`)."""


class RpcError(Exception):
    """An error that is reported to the client as a JSON-RPC error response."""

    def __init__(self, code: ErrorCode, message: str, data: "Wire | None" = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
