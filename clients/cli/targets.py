"""The workspace and the session a command acts on, from its arguments."""

import argparse
from pathlib import Path

from tether.clients.cli.exit_codes import EXIT_USAGE, CliError
from tether.clients.discovery import find_workspace
from tether.clients.rpc import Client
from tether.protocol.methods import SESSION_LIST
from tether.protocol.session import SessionInfo


def workspace(args: argparse.Namespace) -> Path:
    """`--workspace` when given (it must be a folder), else the git root above the current one."""
    given: str | None = getattr(args, "workspace", None)
    if given:
        path = Path(given).resolve()
        if not path.is_dir():
            raise CliError(f"{path} is not a directory", EXIT_USAGE)
        return path
    return find_workspace()


def connect(args: argparse.Namespace, *, autostart: bool = True) -> Client:
    """A client of the daemon of the command's workspace, starting one if `autostart`."""
    return Client.connect(workspace(args), autostart=autostart)


def resolve_session(client: Client, ref: str | None) -> SessionInfo:
    """The session `ref` names by id or unique id prefix; the latest when `ref` is None."""
    sessions = client.call(SESSION_LIST).sessions
    if not sessions:
        raise CliError("this workspace has no sessions yet; start one with `tether run`")
    if ref is None:
        return sessions[0]
    matches = [s for s in sessions if s.id == ref] or [s for s in sessions if s.id.startswith(ref)]
    if len(matches) != 1:
        raise CliError(
            f"no session matches {ref!r}" if not matches else f"{ref!r} matches several sessions"
        )
    return matches[0]
