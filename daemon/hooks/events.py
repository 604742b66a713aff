"""What a hook reads on stdin: one JSON object describing the moment it runs for.

Every object has `event`, `hook` (its name), `session_id`, `turn_id` and `workspace` (an
absolute path). Tool events add the call; `post_tool` adds its result; `approval_requested`
adds the request; `turn_end` adds how the turn ended; `turn_waiting` what it waits for.
docs/hooks.md shows each. Fields are only ever added, so a hook written today keeps reading
what it reads.
"""

from typing import Literal

import msgspec

from tether.daemon.config.hooks import HookEventName
from tether.protocol.events import ApprovalKind


class HookInput(msgspec.Struct, kw_only=True):
    event: HookEventName
    hook: str
    session_id: str
    turn_id: str
    workspace: str


class ToolHookInput(HookInput, kw_only=True):
    """`pre_tool`: a call about to run (it passed the permission rules' deny list)."""

    item_id: str
    tool: str
    arguments: object
    """The call's arguments as the model sent them (a JSON object)."""
    command: str = ""
    """The command line, for command tools."""
    path: str = ""
    """The workspace-relative path the call names, for file tools."""
    subagent: str = ""
    """The description of the subagent making the call; empty for the agent's own calls."""


class ToolResultInput(msgspec.Struct, kw_only=True):
    status: Literal["completed", "failed", "cancelled"]
    output: str
    """What the model is given (before any hook adds to it)."""
    exit_code: int | None = None


class PostToolHookInput(ToolHookInput, kw_only=True):
    """`post_tool`: a call that ran, and its result."""

    result: ToolResultInput


class ApprovalHookInput(ToolHookInput, kw_only=True):
    """`approval_requested`: a call that waits for a person's answer (clients were just sent
    the request)."""

    approval_id: str
    kind: ApprovalKind
    """What is asked about: `command`, `edit`, `read` or `tool` (the request's `kind`)."""
    reason: str
    """Why it asks, as clients show it."""


class TurnWaitingHookInput(HookInput, kw_only=True):
    """`turn_waiting`: the turn stopped, waiting on a person."""

    waiting_for: Literal["approval"]
    """What it waits for: an approval (`approval_id`); other reasons may come."""
    approval_id: str = ""


class TurnEndHookInput(HookInput, kw_only=True):
    """`turn_end`: a turn that ended (not one the daemon's stop interrupted)."""

    status: Literal["completed", "failed", "cancelled", "paused"]


encode = msgspec.json.Encoder().encode


def arguments_object(arguments: str) -> object:
    """The model's arguments (JSON text) as an object; {} when they do not decode (a call
    that ran has valid arguments, so this is only a guard)."""
    try:
        return msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
