"""command_kill: stop a background process and everything it started."""

from typing import Annotated, ClassVar

import msgspec

from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.command_output import find_process, status_line
from tether.daemon.tools.run_command import process_table


class CommandKillParams(ToolParams, frozen=True, kw_only=True):
    id: Annotated[str, msgspec.Meta(description="The background process id, e.g. 'p1'.")]


class CommandKill:
    name: ClassVar[str] = "command_kill"
    description: ClassVar[str] = (
        "Stop a background process started with run_command background: true, with every "
        "process it started (SIGTERM, then SIGKILL after 2 s). Returns its unread output."
    )
    kind: ClassVar[ToolKind] = "command"
    params: ClassVar[type[ToolParams]] = CommandKillParams

    def command_line(self, params: CommandKillParams) -> str:
        return f"stop background process {params.id}"

    async def run(self, params: CommandKillParams, ctx: ToolContext) -> str:
        table = process_table(ctx)
        managed = find_process(table, params.id)
        await table.kill(managed.id)
        text = managed.read_new_output()
        return f"{status_line(managed)}\n{text if text else '(no unread output)'}"
