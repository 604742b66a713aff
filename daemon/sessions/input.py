"""What goes with a user's message: the repository's instructions, the editor's state, the
files the message mentions and the texts the client attached, read when the message is sent
(so a queued message keeps what was true then).

Reading touches files only, in worker threads; what joins the history, and when the
instructions count as sent, is the turn's business (`tether.daemon.sessions.loaded`).
"""

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import trio

from tether.daemon.context.instructions import load_project_instructions
from tether.daemon.context.mentions import render_context
from tether.protocol.events import PermissionMode
from tether.protocol.methods import Attachment, EditorContext


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """What goes with a user's message, read when it is sent (`read_turn_input`)."""

    instructions: str = ""
    """The repository's instructions as read then ("" when there are none)."""
    context: str = ""
    """Editor state and mentioned files, rendered for the model."""
    problems: Sequence[str] = ()
    """Paths that could not be attached, and why, for the client that sent them."""
    files: Sequence[str] = ()
    """Workspace-relative paths it names (open in the editor, mentioned): files in play for
    the skills catalog."""


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A user's message to a session, as `turn/start` brings it."""

    text: str
    by: str = ""
    """The client that sent it (empty: unnamed)."""
    permission_mode: PermissionMode | None = None
    """The session's permission mode from now on (None: unchanged)."""
    model: str | None = None
    """The session's model from now on (None: unchanged)."""
    turn_input: TurnInput | None = None
    """What goes with it (None: nothing)."""
    client_env: Mapping[str, str] | None = None
    """The sending client's provider variables (None: it sent none)."""


async def read_turn_input(
    workspace: Path,
    *,
    editor: EditorContext | None,
    mentions: Sequence[str],
    attachments: Sequence[Attachment] = (),
) -> TurnInput:
    """Read the repository's instructions, the editor state and the mentioned files, and
    render them with the attached texts."""
    instructions = await trio.to_thread.run_sync(load_project_instructions, workspace)
    block = ""
    problems: Sequence[str] = ()
    if editor is not None or mentions or attachments:
        cursor = (editor.cursor.line, editor.cursor.column) if editor and editor.cursor else None
        block, problems = await trio.to_thread.run_sync(
            lambda: render_context(
                workspace,
                open_file=editor.open_file if editor else None,
                cursor=cursor,
                selection=editor.selection if editor else None,
                open_files=editor.open_files if editor else (),
                mentions=mentions,
                attachments=[(a.name, a.text) for a in attachments],
            )
        )
    named = [*mentions]
    if editor is not None:
        named += [*([editor.open_file] if editor.open_file else []), *editor.open_files]
    files = tuple(dict.fromkeys(p for p in (_relative(workspace, n) for n in named) if p))
    return TurnInput(instructions=instructions, context=block, problems=problems, files=files)


def _relative(workspace: Path, path: str) -> str:
    """`path` as a normalised workspace-relative POSIX path ("" when it is outside)."""
    joined = os.path.normpath(os.path.join(workspace, path.removeprefix("@")))
    relative = os.path.relpath(joined, os.path.normpath(workspace))
    if relative == "." or relative.startswith(".."):
        return ""
    return Path(relative).as_posix()
