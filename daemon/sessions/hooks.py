"""The user's hooks in a session's turns: made from the settings the turn read, with the
turn's notices and the daemon's record of the process groups it owns.

What a hook may do, and when it runs, is `tether.daemon.hooks.turn`; this is where a turn
hands it the facts of a call (the same ones the permission rules match).
"""

from collections.abc import Callable, Mapping
from pathlib import Path

import trio

from tether.daemon.config.hooks import HookConfig
from tether.daemon.config.settings import load_workspace_rules
from tether.daemon.hooks.turn import Notify, TurnHooks
from tether.daemon.procs.table import ProcessTable
from tether.daemon.sessions.approvals import call_facts
from tether.daemon.sessions.models import ModelSource
from tether.daemon.tools.base import ToolParams
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.run_command import PROCESSES_SERVICE
from tether.daemon.turn.loop import AfterTool
from tether.protocol.items import ToolCall
from tether.protocol.methods import HookInfo, HooksListResult


def turn_hooks(
    hooks: list[HookConfig],
    *,
    workspace: Path,
    session_id: str,
    turn_id: str,
    notify: Notify,
    services: Mapping[str, object],
    env: Mapping[str, str] | None = None,
) -> TurnHooks | None:
    """The hooks of one turn, run in `env` (None: the daemon's environment); None when the
    user configured none (nothing changes)."""
    if not hooks:
        return None
    table = services.get(PROCESSES_SERVICE)
    return TurnHooks(
        hooks,
        workspace=workspace,
        session_id=session_id,
        turn_id=turn_id,
        notify=notify,
        owned=table.owned if isinstance(table, ProcessTable) else None,
        env=env,
    )


def post_tool_hooks(
    hooks: TurnHooks, tools: ToolRegistry, workspace: Path
) -> Callable[[str], AfterTool]:
    """The loop's `after_tool` for the calls of the agent (`""`) or of a subagent (its
    description): the post_tool hooks, given the call's facts."""

    def for_caller(subagent: str) -> AfterTool:
        async def after(item: ToolCall, params: ToolParams, result: ToolResult) -> ToolResult:
            facts = call_facts(tools, workspace, item.tool, params)
            return await hooks.post_tool(item, facts, result, subagent)

        return after

    return for_caller


async def list_hooks(
    models: ModelSource, workspace: Path, client_env: Mapping[str, str] | None
) -> HooksListResult:
    """The user's hooks as a turn starting now for that client would run them, and whether
    the workspace tries to set some (never read)."""
    report = await models.report(client_env)
    rules = await trio.to_thread.run_sync(load_workspace_rules, workspace)
    return HooksListResult(
        hooks=[
            HookInfo(
                event=hook.event,
                command=hook.command,
                name=hook.name,
                match=hook.match,
                timeout_seconds=hook.timeout,
            )
            for hook in report.config.hooks
        ],
        config_file=report.config_file,
        error=report.error,
        workspace_ignored="hooks" in rules.ignored,
    )
