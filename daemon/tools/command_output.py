"""command_output: what a background process printed since the last look."""

import time
from typing import Annotated, ClassVar

import msgspec

from tether.daemon.procs.table import MAX_TAIL, ManagedProcess, ProcessTable
from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolParams
from tether.daemon.tools.run_command import process_table


class CommandOutputParams(ToolParams, frozen=True, kw_only=True):
    id: Annotated[
        str, msgspec.Meta(description="The background process id run_command returned, e.g. 'p1'.")
    ]


def find_process(table: ProcessTable, process_id: str) -> ManagedProcess:
    try:
        return table.get(process_id)
    except KeyError:
        known = ", ".join(info.id for info in table.list()) or "none"
        raise ToolFailure(
            f"There is no background process {process_id!r} (known: {known})."
        ) from None


def status_line(managed: ManagedProcess) -> str:
    if managed.status == "running":
        age = time.time() - managed.started_at
        return f"[{managed.id} running for {age:.0f} s, pid {managed.pid}: {managed.command}]"
    if managed.status == "killed":
        return f"[{managed.id} was stopped: {managed.command}]"
    return f"[{managed.id} exited with code {managed.exit_code}: {managed.command}]"


class CommandOutput:
    name: ClassVar[str] = "command_output"
    description: ClassVar[str] = (
        "Read the output a background process (started with run_command background: true) "
        "printed since the last command_output call, with its status. At most the last "
        "200,000 unread characters are kept."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = CommandOutputParams

    async def run(self, params: CommandOutputParams, ctx: ToolContext) -> str:
        managed = find_process(process_table(ctx), params.id)
        text = managed.read_new_output()
        result = f"{status_line(managed)}\n{text if text else '(no new output)'}"
        failed = managed.status == "exited" and managed.exit_code != 0
        if failed and managed.sandbox is not None:
            last, _ = managed.tail(MAX_TAIL)
            if advice := managed.sandbox.network_advice(last):
                result += f"\n({advice})"
        return result
