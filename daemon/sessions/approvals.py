"""Approvals as session state, and the gate that asks for them.

Rules (every client sees the same thing):
- A request is an `approval_requested` event with everything needed to decide; it stays in
  the session snapshot until answered, so a client that attaches later sees it.
- Any controller may answer; the first answer wins and is broadcast as `approval_resolved`
  with who answered; a later answer gets APPROVAL_RESOLVED naming the winner.
- With nobody attached the request simply waits: the turn pauses, it does not fail.
- Cancelling the turn (or stopping the daemon) resolves a waiting request as denied by
  `daemon`.
- "Always allow" adds the request's `alwaysRule` to the session's rules (persisted with the
  resolution event, so it survives a restart).
- The user's pre_tool hooks run for a call the rules do not deny, before a person is asked;
  one of them may refuse it (`tether.daemon.hooks.turn`). Their approval_requested and
  turn_waiting hooks run beside the wait for the answer; the call goes on once both are over.
- A request no controller sees is notified after a while (`tether.daemon.sessions.notifications`);
  one answered first is not.
- A call that needs the user's trust (`TrustGated`: a workspace's skills) asks whatever the
  mode; any yes is remembered by the tool, for the workspace, beyond the session.
"""

import contextlib
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec
import trio

from tether.daemon.hooks.turn import TurnHooks
from tether.daemon.logs.log import get_logger
from tether.daemon.sessions.notifications import TurnNotifications
from tether.daemon.sessions.session import Session, new_id
from tether.daemon.tools.base import (
    CommandTool,
    EditTool,
    ExternalTool,
    MultiFileEdit,
    SandboxedTool,
    ToolContext,
    ToolFailure,
    ToolParams,
    TrustGated,
    implements,
    resolved_and_shown,
)
from tether.daemon.tools.filetree import FileSearch
from tether.daemon.tools.registry import ToolRegistry, failure
from tether.daemon.turn.permissions import CallFacts, PermissionPolicy, Verdict
from tether.protocol.error_data import ApprovalAnswered
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    Decision,
    DecisionScope,
)
from tether.protocol.items import ToolCall

log = get_logger(__name__)

DENIED = (
    "The user denied this call{why}. Do not retry it; choose another way to reach the goal, "
    "or ask the user how to proceed."
)


class _Waiter:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.resolution: ApprovalResolved | None = None


class ApprovalBroker:
    """The pending approvals of one session and the turns waiting on them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._waiting: dict[str, _Waiter] = {}

    async def ask(self, request: ApprovalRequest) -> ApprovalResolved:
        """Announce the request and wait for the first answer. Cancelling the wait resolves
        the request as denied."""
        waiter = self._waiting[request.id] = _Waiter()
        self.session.emit(ApprovalRequested(approval=request))
        try:
            await waiter.done.wait()
        finally:
            self._waiting.pop(request.id, None)
            if waiter.resolution is None:
                self.session.deny_for_daemon(request, "the turn was cancelled")
        assert waiter.resolution is not None
        return waiter.resolution

    def respond(
        self,
        approval_id: str,
        *,
        decision: Decision,
        scope: DecisionScope,
        by: str,
        message: str = "",
    ) -> ApprovalResolved:
        earlier = self.session.resolved_approvals.get(approval_id)
        if earlier is not None:
            raise RpcError(
                ErrorCode.APPROVAL_RESOLVED,
                f"approval {approval_id} was already answered ({earlier.decision}) by {earlier.by}",
                ApprovalAnswered(by=earlier.by, decision=earlier.decision),
            )
        waiter = self._waiting.get(approval_id)
        request = self.session.pending_approvals.get(approval_id)
        if waiter is None or request is None:
            raise RpcError(
                ErrorCode.APPROVAL_NOT_FOUND, f"no pending approval {approval_id!r} in this session"
            )
        resolution = ApprovalResolved(
            approval_id=approval_id,
            turn_id=request.turn_id,
            decision=decision,
            scope=scope if decision == "allow" else "once",
            by=by,
            message=message,
        )
        waiter.resolution = resolution
        self.session.emit(resolution)
        waiter.done.set()
        return resolution


def call_facts(tools: ToolRegistry, workspace: Path, name: str, params: ToolParams) -> CallFacts:
    """What the permission policy decides on for one call of the tool `name`: its kind, the
    workspace-relative path it names, the glob a search selects files by, its command line."""
    tool = tools.get(name)
    kind = tool.kind if tool is not None else "other"
    path = ""
    if implements(tool, EditTool):
        path = tool.target_path(params)
    else:
        raw_path = getattr(params, "path", None)
        if isinstance(raw_path, str):
            path = raw_path
    if path:
        # A path that escapes the workspace stays as given: the tool refuses it itself.
        with contextlib.suppress(ToolFailure):
            _, path = resolved_and_shown(workspace, path)
    glob = tool.file_glob(params) if implements(tool, FileSearch) else ""
    command = tool.command_line(params) if implements(tool, CommandTool) else ""
    cwd = ""
    raw_cwd = getattr(params, "cwd", None)
    if command and isinstance(raw_cwd, str):
        with contextlib.suppress(ToolFailure):
            _, cwd = resolved_and_shown(workspace, raw_cwd)
    trust = tool.trust_question(params) if implements(tool, TrustGated) else ""
    external = tool.external_target() if implements(tool, ExternalTool) else ""
    sandboxed = implements(tool, SandboxedTool) and tool.runs_sandboxed(params)
    return CallFacts(
        tool=name,
        kind=kind,
        path=path,
        glob=glob,
        command=command,
        cwd=cwd,
        trust=trust,
        external=external,
        sandboxed=sandboxed,
    )


_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


async def judge(
    policy: PermissionPolicy,
    facts: CallFacts,
    tool: object,
    params: ToolParams,
    context: Callable[[], ToolContext],
) -> Verdict:
    """The policy's verdict on a call. For an edit that also changes other files (a rename
    across files), the strictest verdict over every file it would change: a rule or a
    sensitive path that guards one of them guards it, whichever file the call names. An ask
    that comes from another file offers no "always" rule (that rule would name the target)."""
    verdict = policy.decide(facts)
    if verdict.action == "deny" or not implements(tool, MultiFileEdit):
        return verdict
    for path in await tool.edited_paths(params, context()):
        if path == facts.path:
            continue
        other = policy.decide(msgspec.structs.replace(facts, path=path))
        if _STRICTNESS[other.action] > _STRICTNESS[verdict.action]:
            verdict = msgspec.structs.replace(other, always_rule="")
            if verdict.action == "deny":
                break
    return verdict


class SessionGate:
    """The loop's gate for one turn: the permission policy, then (maybe) a person."""

    def __init__(
        self,
        *,
        session: Session,
        broker: ApprovalBroker,
        policy: PermissionPolicy,
        tools: ToolRegistry,
        workspace: Path,
        turn_id: str,
        context: Callable[[ToolCall], ToolContext],
        prewarm: Callable[[Path], None] | None = None,
        subagent: str = "",
        hooks: TurnHooks | None = None,
        notifications: TurnNotifications | None = None,
    ) -> None:
        """`subagent`: the description of the subagent whose calls this gate checks (named
        in its approvals); empty for the agent's own. `hooks`: the user's pre_tool hooks run
        for a call the rules do not deny, before anyone is asked, and their approval hooks
        while it is. `notifications`: the turn's, for requests no controller sees."""
        self.hooks = hooks
        self.notifications = notifications
        self.prewarm = prewarm
        self.subagent = subagent
        self.session = session
        self.broker = broker
        self.policy = policy
        self.tools = tools
        self.workspace = workspace
        self.turn_id = turn_id
        self.context = context
        self._trust_asked = trio.Lock()

    def facts(self, item: ToolCall, params: ToolParams) -> CallFacts:
        return call_facts(self.tools, self.workspace, item.tool, params)

    async def check(self, item: ToolCall, params: ToolParams) -> str | None:
        facts = self.facts(item, params)
        if facts.trust:
            # Concurrent reads of one step would each ask the same trust question: one asks,
            # the others look again once it is answered.
            async with self._trust_asked:
                return await self._check(item, params, self.facts(item, params))
        return await self._check(item, params, facts)

    async def _check(self, item: ToolCall, params: ToolParams, facts: CallFacts) -> str | None:
        denial = await self._verdict(item, params, facts)
        if (
            denial is None
            and self.prewarm is not None
            and facts.path
            and facts.kind
            in (
                "read",
                "edit",
            )
        ):
            # A file the agent looks at is likely to be edited next: start its language
            # servers now, so that the diagnostics after the edit find them warm. Only once
            # the call may run: a denied read must not start anything.
            self.prewarm(self.workspace / facts.path)
        return denial

    async def _verdict(self, item: ToolCall, params: ToolParams, facts: CallFacts) -> str | None:
        """None when the call may run, else why not (for the model)."""
        tool = self.tools.get(item.tool)
        try:
            verdict = await judge(self.policy, facts, tool, params, lambda: self.context(item))
        except Exception as exc:  # it would fail anyway: nothing to ask about
            return failure(item.tool, exc)
        if verdict.action == "deny":
            return (
                f"Permission denied: {verdict.reason}. Do not retry this call; choose another way."
            )
        if self.hooks is not None:
            denial = await self.hooks.pre_tool(item, facts, self.subagent)
            if denial is not None:
                return denial
        if verdict.action == "allow":
            return None
        preview = ""
        if implements(tool, EditTool):
            try:
                preview = await tool.preview(params, self.context(item))
            except Exception as exc:  # it would fail anyway: nothing to ask about
                return failure(item.tool, exc)
        request = ApprovalRequest(
            id=new_id("a"),
            turn_id=self.turn_id,
            item_id=item.id,
            tool=item.tool,
            arguments=item.arguments,
            kind=facts.approval_kind,
            reason=verdict.reason,
            command=facts.command,
            path=facts.path,
            preview=preview,
            always_rule=verdict.always_rule,
            subagent=self.subagent,
            requested_at=time.time(),
        )
        resolution = await self._ask(item, facts, request)
        if resolution.decision == "allow":
            if facts.trust and implements(tool, TrustGated):
                try:
                    await tool.trust_granted(params, resolution.by)
                except OSError:
                    log.exception("could not record the trust the user gave", trust=facts.trust)
            return None
        why = f" ({resolution.message})" if resolution.message else ""
        return DENIED.format(why=why)

    async def _ask(
        self, item: ToolCall, facts: CallFacts, request: ApprovalRequest
    ) -> ApprovalResolved:
        """Ask a person `request` and wait for the answer, the approval hooks running beside
        the wait (the answer is returned once they are over too)."""
        pending = self.session.pending_approvals.values()
        first = not any(approval.turn_id == self.turn_id for approval in pending)
        notified = (
            self.notifications.waiting(request)
            if self.notifications is not None
            else contextlib.nullcontext()
        )
        async with trio.open_nursery() as nursery:
            if self.hooks is not None:
                hooks = self.hooks.approval_requested
                nursery.start_soon(
                    partial(hooks, item, facts, request, first=first, subagent=self.subagent)
                )
            with notified:
                return await self.broker.ask(request)
