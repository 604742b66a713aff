"""task: hand a self-contained piece of work to a subagent and get back its report.

The tool is only the call's shape; the subagent itself (a turn loop of its own, its tools, its
model, the limits) is the session's `SubagentRunner`, registered in the tool services under
"subagents" (`tether.daemon.sessions.subagents`). An explore call runs beside the step's other
read-only calls and explore calls; a general one runs alone, in order, like an edit.
"""

from typing import Annotated, ClassVar, Literal, Protocol, runtime_checkable

import msgspec

from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolOutput, ToolParams

SUBAGENTS_SERVICE = "subagents"
"""The key of the turn's `SubagentRunner` in `ToolContext.services`."""

SubagentKind = Literal["explore", "general"]


class TaskParams(ToolParams, frozen=True, kw_only=True):
    description: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=100,
            description="What the subagent does, in 3-6 words (shown to the user).",
        ),
    ]
    prompt: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description=(
                "The whole task: the subagent sees nothing of this conversation, so say what "
                "to find or do, where to look, and what its report must contain."
            ),
        ),
    ]
    subagent_type: Annotated[
        SubagentKind,
        msgspec.Meta(
            description=(
                "explore (default): read-only tools, runs in parallel with other explore "
                "tasks; general: may also edit files and run commands, runs alone."
            )
        ),
    ] = "explore"


@runtime_checkable
class SubagentRunner(Protocol):
    async def run(self, params: TaskParams, ctx: ToolContext) -> ToolOutput:
        """Run a subagent for the call `ctx.item_id` and return its report. Raises
        `ToolFailure` when it cannot be started or fails; cancellation stops it."""
        ...


class Task:
    name: ClassVar[str] = "task"
    description: ClassVar[str] = (
        "Start a subagent on a self-contained task and get back only its final report. It "
        "starts from a fresh context (it sees only your prompt), so write the prompt in full. "
        "explore subagents have read-only tools (read_file, grep, glob, list_dir) and run in "
        "parallel: ask several in one response to search different areas at once, e.g. "
        "'where is the session created, and who calls it?'. general subagents may also edit "
        "files and run commands; they run one at a time. Subagents cannot start subagents. "
        "At most 4 run at once and 12 per turn; a subagent makes at most 40 model calls."
    )
    kind: ClassVar[ToolKind] = "other"
    params: ClassVar[type[ToolParams]] = TaskParams

    def concurrent(self, params: TaskParams) -> bool:
        """Whether the call may run beside neighbouring read-only calls: explore ones do."""
        return params.subagent_type == "explore"

    async def run(self, params: TaskParams, ctx: ToolContext) -> ToolOutput:
        runner = ctx.services.get(SUBAGENTS_SERVICE)
        if not isinstance(runner, SubagentRunner):
            raise ToolFailure("Subagents are not available here; do the work yourself.")
        return await runner.run(params, ctx)
