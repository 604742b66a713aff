"""The `tether` command's exit codes, and the refusal a command raises to end with one.

0 the turn completed (or the command succeeded); 1 the turn failed or the command was refused;
2 bad usage or no daemon, or a choice the command could not make without a terminal; 3 the turn
was cancelled or interrupted; 4 the turn paused at its step budget; 130 the person left with
Ctrl-C (`tether attach`: the turn goes on).

`run` and `attach` end with the code of the status of the turn they followed, `attach` of a
session whose last turn already ended with that turn's.
"""

from tether.protocol.events import TurnStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_PAUSED = 4
EXIT_INTERRUPTED = 130

STATUS_EXIT: dict[TurnStatus, int] = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "interrupted": EXIT_CANCELLED,
    "paused": EXIT_PAUSED,
    "running": EXIT_FAILED,
}
"""The exit code of a command that followed a turn, by the status the turn ended with."""


class CliError(Exception):
    """A command refused or failed: `main` prints the message and exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
