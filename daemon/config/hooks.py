"""Hooks as the user configures them: `[[hooks]]` tables in the user's config.toml.

Only the user's own file is read for hooks: a workspace's `.tether/config.toml` that sets
`hooks` has them ignored, with a notice (`tether.daemon.config.settings.load_workspace_rules`),
because a hook is a command tether runs by itself, outside the permission gate.
"""

from typing import Annotated

import msgspec

from tether.protocol.enums import HookEvent

HookEventName = HookEvent
TOOL_EVENTS: tuple[HookEventName, ...] = ("pre_tool", "post_tool", "approval_requested")
"""The events of one tool call, the only ones `match` applies to."""

DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 120.0


class HookConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    event: HookEventName
    command: Annotated[str, msgspec.Meta(min_length=1)]
    """Run by the user's shell (`$SHELL -c`) in the workspace, the event as JSON on stdin."""
    match: list[str] = []
    """Permission rules (`run_command(git push *)`, `edit_file(src/*)`, `write_file`): the
    hook runs for a call any of them matches; empty: for every call. Tool events only
    (`TOOL_EVENTS`)."""
    name: str = ""
    """Shown in notices and listings; empty: the command."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT)] = DEFAULT_TIMEOUT
    """Seconds before the hook's process tree is stopped (a failure, never a denial)."""

    def __post_init__(self) -> None:
        if self.match and self.event not in TOOL_EVENTS:
            raise ValueError(
                "`match` applies to pre_tool, post_tool and approval_requested hooks,"
                f" not {self.event}"
            )

    @property
    def label(self) -> str:
        return self.name or self.command
