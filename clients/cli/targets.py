"""The workspace and the session a command acts on, from its arguments."""

import argparse
import sys
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
    found = find_workspace()
    _say_if_too_wide(found)
    return found


_told: set[Path] = set()


def _say_if_too_wide(found: Path) -> None:
    """Found (not given) a workspace that is the home folder or `/`: say so, once per start of
    its daemon (when none serves it yet), with what to do instead. The agent reads and
    writes within its workspace: everything under it."""
    import os

    from tether.clients.core.discovery import held_workspace_record

    home = os.environ.get("HOME")
    wide = found == Path(found.anchor) or (home is not None and found == Path(home).resolve())
    if not wide or found in _told or held_workspace_record(found) is not None:
        return
    _told.add(found)
    what = "the root folder" if found == Path(found.anchor) else "your home folder"
    sys.stderr.write(
        f"tether: the workspace is {found}, {what}: the agent may read and change anything"
        " under it. Start tether in your project's folder, or give -w PROJECT.\n"
    )


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


def configured_model(client: "Client") -> str:
    """The model a session without one of its own uses (the settings in effect for this
    client); "" when the daemon cannot say."""
    from tether.clients.core.rpc import CallError
    from tether.protocol.methods import DAEMON_STATUS

    try:
        return client.call(DAEMON_STATUS).model
    except CallError:
        return ""
