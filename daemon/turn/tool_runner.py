"""What the turn loop needs of the tools: the `ToolRunner` seam.

The loop knows tools only through this protocol, never a concrete tool class, so it can be run
over any set of tools (`tether.daemon.tools.registry.ToolRegistry` is the daemon's).
"""

from pathlib import Path
from typing import Protocol

from tether.daemon.providers.base import ToolSet
from tether.daemon.tools.base import ToolContext, ToolParams
from tether.daemon.tools.registry import ToolResult


class ToolRunner(Protocol):
    @property
    def toolset(self) -> ToolSet:
        """The tools' schemas, as sent to the model with every call."""
        ...

    def validate(self, name: str, arguments: str) -> ToolParams | str:
        """The decoded params of a call, or a message for the model saying what is wrong."""
        ...

    def is_read_only(self, name: str) -> bool:
        """Whether tool `name` only looks (its calls may run beside other reads)."""
        ...

    def runs_concurrently(self, name: str, params: ToolParams) -> bool:
        """Whether a validated call may run beside neighbouring concurrent calls (reads, and
        calls that change nothing themselves); every other call runs alone."""
        ...

    def edited_path(self, name: str, params: ToolParams) -> Path | None:
        """The file a validated call changes, for the diagnostics after edits; None when
        the tool is not an edit tool."""
        ...

    async def run(self, name: str, params: ToolParams, ctx: ToolContext) -> ToolResult:
        """Run a validated call. A tool's failure is a `failed` result; only cancellation
        (and nothing else) propagates."""
        ...
