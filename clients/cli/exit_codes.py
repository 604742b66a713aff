"""The `tether` command's exit codes, and the refusal a command raises to end with one.

0 the turn completed (or the command succeeded); 1 the turn failed or the command was refused;
2 bad usage, no daemon, nothing to act on (no session, no running turn, no pending approval,
nothing to undo), or a choice the command could not make without a terminal; 3 the turn was
cancelled or interrupted; 4 the turn paused at its step budget; 130 the person left with Ctrl-C
(`tether attach`: the turn goes on).

`run` and `attach` end with the code of the status of the turn they followed, `attach` of a
session whose last turn already ended with that turn's.
"""

from tether.protocol.errors import ErrorCode

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:  # the events' module and msgspec are not needed before a command runs
    from tether.protocol.events import TurnStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_PAUSED = 4
EXIT_INTERRUPTED = 130

STATUS_EXIT: "dict[TurnStatus, int]" = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "interrupted": EXIT_CANCELLED,
    "paused": EXIT_PAUSED,
    "running": EXIT_FAILED,
}
"""The exit code of a command that followed a turn, by the status the turn ended with."""

NOTHING_TO_ACT_ON = frozenset(
    {
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.NO_RUNNING_TURN,
        ErrorCode.APPROVAL_NOT_FOUND,
        ErrorCode.NOTHING_TO_UNDO,
        ErrorCode.PROCESS_NOT_FOUND,
        ErrorCode.TURN_NOT_FOUND,
    }
)
"""The daemon's errors that mean what a command names does not exist (`EXIT_USAGE`), as
opposed to a refusal or a failure (`EXIT_FAILED`)."""


BAD_USAGE = frozenset({ErrorCode.SEARCH_QUERY_INVALID})
"""The daemon's errors that mean what the person typed cannot be used (`EXIT_USAGE`)."""


def call_error_exit(code: int) -> int:
    """The exit code for a daemon's error response with JSON-RPC error `code`."""
    return EXIT_USAGE if code in NOTHING_TO_ACT_ON or code in BAD_USAGE else EXIT_FAILED


class CliError(Exception):
    """A command refused or failed: `main` prints the message and exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
