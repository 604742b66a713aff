"""The workspace and the session a command acts on, from its arguments."""

import argparse
from pathlib import Path

from tether.clients.cli.exit_codes import EXIT_USAGE, CliError
from tether.clients.core.discovery import find_workspace

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:  # `main` resolves the workspace before the client's imports are needed
    from tether.clients.core.rpc import Client
    from tether.protocol.session import SessionInfo


def workspace(args: argparse.Namespace) -> Path:
    """`--workspace` when given (it must be a folder), else the git root above the current one;
    with `--remote`, the folder on the remote machine (checked there)."""
    given: str | None = getattr(args, "workspace", None)
    if given and getattr(args, "remote_root", False):
        return Path(given)
    if given:
        path = Path(given).resolve()
        if not path.is_dir():
            raise CliError(f"{path} is not a directory", EXIT_USAGE)
        return path
    return find_workspace()


def connect(args: argparse.Namespace) -> "Client":
    """A client of the daemon of the command's workspace, starting one when none runs (every
    command that talks to the daemon does, as the README says). Every command calls the
    daemon first thing, so its first request goes out behind `initialize`, unanswered yet."""
    from tether.clients.core.rpc import Client

    return Client.connect(workspace(args), wait_initialized=False)


def resolve_session(client: "Client", ref: str | None) -> "SessionInfo":
    """The session `ref` names by id or unique id prefix; the latest when `ref` is None."""
    from tether.protocol.methods import SESSION_LIST

    sessions = client.call(SESSION_LIST).sessions
    if not sessions:
        raise CliError(
            "this workspace has no sessions yet; start one with `tether run`", EXIT_USAGE
        )
    if ref is None:
        return sessions[0]
    matches = [s for s in sessions if s.id == ref] or [s for s in sessions if s.id.startswith(ref)]
    if not matches:
        raise CliError(f"no session matches {ref!r}", EXIT_USAGE)
    if len(matches) > 1:
        raise CliError(f"{ref!r} matches several sessions", EXIT_USAGE)
    return matches[0]
