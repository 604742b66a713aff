"""The hooks of one turn: which ones a moment calls for, and what their answers do.

Rules:
- A tool hook runs for a call when it has no `match`, or when one of its rules matches the
  call as a permission rule would (`run_command(git push *)`: the command line; `edit_file(src/*)`:
  the workspace-relative path; `task`: every call of the tool).
- Hooks of one moment run one after another, in the order of the config file.
- `pre_tool`: exit 0 lets the call go on; exit 2 (`DENY_EXIT`) refuses it, with the hook's
  output as the reason the model is given, and a `hook_denied` notice; the first denial wins
  and the later hooks do not run. A hook cannot change the call.
- `post_tool`: the output of a hook that exits 0 is added to the result the model (and every
  client) sees.
- `approval_requested` (a call asks a person; `match` selects calls as for tool hooks) and
  then, when no other request of the turn was pending, `turn_waiting` (the turn stops,
  waiting on a person) run beside the wait for the answer: their exit status only tells a
  failure.
- Any other end (another exit status, a timeout, a signal, a command that cannot start) is a
  `hook_failed` notice on the turn, and the turn goes on as if the hook were not there: a
  pre_tool hook that fails does not stop the call.
"""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import msgspec

from tether.daemon.config.hooks import HookConfig, HookEventName
from tether.daemon.hooks.events import (
    ApprovalHookInput,
    HookInput,
    PostToolHookInput,
    ToolHookInput,
    ToolResultInput,
    TurnEndHookInput,
    TurnWaitingHookInput,
    arguments_object,
    encode,
)
from tether.daemon.hooks.run import HookRun, run_hook
from tether.daemon.procs.ownership import OwnedGroups
from tether.daemon.tools.registry import ToolResult
from tether.daemon.turn.permissions import CallFacts, rule_matches
from tether.protocol.enums import NoticeCode
from tether.protocol.events import ApprovalRequest, TurnEndStatus
from tether.protocol.items import NoticeLevel, ToolCall

DENY_EXIT = 2
"""The exit status by which a pre_tool hook refuses a call."""

Notify = Callable[[NoticeLevel, NoticeCode, str], None]

_CONSEQUENCE: dict[HookEventName, str] = {
    "pre_tool": "the call went ahead",
    "post_tool": "the result is unchanged",
    "turn_end": "the turn ended as it would have",
    "session_start": "the turn went on",
    "approval_requested": "the request still waits for an answer",
    "turn_waiting": "the turn still waits",
}


def hook_matches(hook: HookConfig, facts: CallFacts) -> bool:
    return not hook.match or any(rule_matches(rule, facts) for rule in hook.match)


class TurnHooks:
    """The user's hooks as one turn of one session runs them."""

    def __init__(
        self,
        hooks: Sequence[HookConfig],
        *,
        workspace: Path,
        session_id: str,
        turn_id: str,
        notify: Notify,
        owned: OwnedGroups | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`notify` puts a notice on the turn; `owned` records the hooks' process groups;
        `env`: the environment hooks start from (default: the daemon's)."""
        self.hooks = list(hooks)
        self.workspace = workspace
        self.session_id = session_id
        self.turn_id = turn_id
        self.notify = notify
        self.owned = owned
        self.env = env

    def _for(self, event: HookEventName, facts: CallFacts | None = None) -> list[HookConfig]:
        return [
            hook
            for hook in self.hooks
            if hook.event == event and (facts is None or hook_matches(hook, facts))
        ]

    async def _run(self, hook: HookConfig, payload: HookInput) -> HookRun:
        return await run_hook(
            hook, encode(payload), workspace=self.workspace, owned=self.owned, env=self.env
        )

    def _failed(self, hook: HookConfig, why: str, about: str = "") -> None:
        self.notify(
            "warning",
            "hook_failed",
            f"The {hook.event} hook `{hook.label}`{about} {why}; {_CONSEQUENCE[hook.event]}.",
        )

    def _call_input(
        self, hook: HookConfig, item: ToolCall, facts: CallFacts, subagent: str
    ) -> ToolHookInput:
        return ToolHookInput(
            **msgspec.structs.asdict(self._base(hook)),
            item_id=item.id,
            tool=item.tool,
            arguments=arguments_object(item.arguments),
            command=facts.command,
            path=facts.path,
            subagent=subagent,
        )

    async def pre_tool(self, item: ToolCall, facts: CallFacts, subagent: str = "") -> str | None:
        """None when every matching pre_tool hook lets the call run; otherwise what the model
        is given instead of its result (the first denial's reason)."""
        for hook in self._for("pre_tool", facts):
            run = await self._run(hook, self._call_input(hook, item, facts, subagent))
            why = run.failure(hook.timeout, deny_code=DENY_EXIT)
            if why:
                self._failed(hook, why, f" (for {item.tool})")
                continue
            if run.exit_code == DENY_EXIT:
                reason = run.output or "no reason given"
                self.notify(
                    "warning",
                    "hook_denied",
                    f"The pre_tool hook `{hook.label}` denied {_call_label(item, facts)}: {reason}",
                )
                return f"A pre_tool hook of the user (`{hook.label}`) refused this call: {reason}"
        return None

    async def post_tool(
        self, item: ToolCall, facts: CallFacts, result: ToolResult, subagent: str = ""
    ) -> ToolResult:
        """`result` with the output of every matching post_tool hook that exited 0 added."""
        if result.status not in ("completed", "failed"):
            return result
        added: list[str] = []
        for hook in self._for("post_tool", facts):
            payload = PostToolHookInput(
                **msgspec.structs.asdict(self._call_input(hook, item, facts, subagent)),
                result=ToolResultInput(
                    status=result.status, output=result.output, exit_code=result.exit_code
                ),
            )
            run = await self._run(hook, payload)
            why = run.failure(hook.timeout)
            if why:
                self._failed(hook, why, f" (for {item.tool})")
            elif run.output:
                added.append(f"[post_tool hook `{hook.label}`]\n{run.output}")
        if not added:
            return result
        return msgspec.structs.replace(result, output="\n\n".join([result.output, *added]))

    async def approval_requested(
        self,
        item: ToolCall,
        facts: CallFacts,
        request: ApprovalRequest,
        *,
        first: bool,
        subagent: str = "",
    ) -> None:
        """Run the approval_requested hooks matching the call `item` asks `request` for, then,
        when the request is the `first` of the turn's pending ones, the turn_waiting hooks.
        An answer does not stop them (the call waits for them); cancelling the turn does."""
        for hook in self._for("approval_requested", facts):
            payload = ApprovalHookInput(
                **msgspec.structs.asdict(self._call_input(hook, item, facts, subagent)),
                approval_id=request.id,
                kind=request.kind,
                reason=request.reason,
            )
            self._report(hook, await self._run(hook, payload), f" (for {item.tool})")
        if not first:
            return
        for hook in self._for("turn_waiting"):
            payload = TurnWaitingHookInput(
                **msgspec.structs.asdict(self._base(hook)),
                waiting_for="approval",
                approval_id=request.id,
            )
            self._report(hook, await self._run(hook, payload))

    async def turn_end(self, status: TurnEndStatus) -> None:
        """Run the turn_end hooks for a turn that ended `status` (not `interrupted`)."""
        if status == "interrupted":
            return
        for hook in self._for("turn_end"):
            payload = TurnEndHookInput(**msgspec.structs.asdict(self._base(hook)), status=status)
            self._report(hook, await self._run(hook, payload))

    async def session_start(self) -> None:
        """Run the session_start hooks (at the start of a session's first turn)."""
        for hook in self._for("session_start"):
            self._report(hook, await self._run(hook, self._base(hook)))

    def _base(self, hook: HookConfig) -> HookInput:
        return HookInput(
            event=hook.event,
            hook=hook.label,
            session_id=self.session_id,
            turn_id=self.turn_id,
            workspace=str(self.workspace),
        )

    def _report(self, hook: HookConfig, run: HookRun, about: str = "") -> None:
        why = run.failure(hook.timeout)
        if why:
            self._failed(hook, why, about)


def _call_label(item: ToolCall, facts: CallFacts) -> str:
    target = facts.command or facts.path
    return f"{item.tool}({target})" if target else item.tool
