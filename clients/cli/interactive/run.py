"""Starting the interactive session: the chat, with the slash commands wired in."""

import asyncio
from pathlib import Path

from tether.clients.cli.interactive.actions import run_slash
from tether.clients.cli.interactive.chat import Chat
from tether.clients.core.channel import SharedClient
from tether.protocol.events import PermissionMode


def run_chat(
    client: SharedClient,
    workspace: Path,
    session_id: str | None,
    *,
    permission_mode: PermissionMode | None = None,
    bell: bool = True,
) -> None:
    """Run the interactive session until the person leaves; a running turn keeps running.
    `session_id` None: a new session, created with the first message. `bell`: ring the
    terminal's bell when an approval waits."""
    chat = Chat(client, workspace, slash=run_slash, permission_mode=permission_mode, bell=bell)
    asyncio.run(chat.run(session_id))
