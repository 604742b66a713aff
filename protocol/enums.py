"""The closed sets of values the daemon sends, as `Literal`s (each is an `enum` in the schema).

Closed for this protocol version, open for the next: a newer daemon may add a value without
changing `PROTOCOL_VERSION`, so a client treats one it does not know as it would the nearest
general case (an unknown notice code as no code, an unknown end status as `failed`), never as
an error. What each value means is said where a field carries it.
"""

from typing import Literal

TurnEndStatus = Literal["completed", "failed", "cancelled", "interrupted", "paused"]
"""How a turn ended (`turn_completed.status`, `turn_summary.stopReason`)."""
TurnStatus = Literal["running", TurnEndStatus]
"""A turn's status: `running` until its `turn_completed`, then how it ended."""

ModelErrorCode = Literal[
    "model_error", "model_unreachable", "model_http_error", "model_protocol_error", "model_timeout"
]
"""Why a model call failed."""
TurnErrorCode = Literal[
    ModelErrorCode, "config_invalid", "compaction_failed", "internal_error", "interrupted"
]
"""Why a turn failed (`TurnError.code`)."""
NoticeCode = Literal[
    "",
    ModelErrorCode,
    "config_invalid",
    "compaction_failed",
    "compaction_skipped",
    "step_budget",
    "output_limit",
    "todo_reminder",
    "model_stream",
    "workspace_config",
    "hook_denied",
    "hook_failed",
    "mcp",
    "sandbox",
    "workspace_trust",
]
"""What a notice is about (`Notice.code`); empty: none of these."""

CompactionStep = Literal["earlier_turns", "old_tool_results", "summary"]
CompactionTrigger = Literal["auto", "manual"]

McpEventKind = Literal["mcp/crashed", "mcp/restarted", "mcp/recovered", "mcp/failed"]
"""What a `daemon/event` about an MCP server says: it crashed (it is restarted after a
backoff), it is back, or it kept failing and tether stopped trying for now."""

DaemonEventKind = Literal["lsp/crashed", "lsp/restarted", "store/write_failed", McpEventKind]
"""What a `daemon/event` is about."""

HookEvent = Literal[
    "pre_tool", "post_tool", "turn_end", "session_start", "approval_requested", "turn_waiting"
]
"""When a user's hook runs: before a tool call (it may refuse it), after one (its output may
join the result), when a turn ends, when a session's first turn starts, when a call asks for
approval, when a turn starts waiting on a person."""

SkillOrigin = Literal["user", "workspace"]
"""Where a skill comes from: the user's own skills folder (trusted), or the workspace's
(`.tether/skills/`, `.claude/skills/`, `.agents/skills/`: used once the user trusts them)."""

McpServerState = Literal[
    "needs_approval", "idle", "starting", "running", "crashed", "restarting", "failed"
]
"""Where an MCP server is in its life (docs/mcp.md draws the machine)."""
