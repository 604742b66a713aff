"""Subagents: the `task` tool's runner for one turn.

Rules:
- A subagent is a turn loop of its own over a fresh history: a short system prompt with the
  environment block, then the task's prompt as its only user message. It has its own read
  versions (the edit guard: it reads a file before editing it, whatever the parent read),
  at most min(max_steps, 40) model calls, and its own tools — explore: read_file, grep, glob,
  list_dir (and skill when it exists); general: those and edit_file, write_file,
  run_command. Neither can start subagents or keep the todo list; a call of a tool it lacks
  is refused with a result that says so.
- It calls the session's subagent model, else the user's `subagent_model`, else the model
  the turn calls.
- At most `MAX_RUNNING` (4) run at once; the others wait `queued` (an `item_updated` of the
  task call says so) and start as one finishes. At most `MAX_PER_TURN` (12) start per turn:
  a call beyond that is answered, without starting anything, with why.
- Its items are the turn's items with `parent_item_id` naming the task call; its calls pass
  the session's permission gate like the agent's own, and an approval names the subagent.
- Only its final reply (the text of its last model call) goes back, as the task call's
  result ("(no report)" when it is empty); its tokens count in the turn's usage.
- Cancelling the turn cancels it: its loop closes its open calls as cancelled and its
  commands' process groups are stopped, before the task call itself is closed.
"""

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import msgspec
import trio

from tether.daemon.context.budget import TokenMeter, context_budget
from tether.daemon.context.compact import CompactionError, compact_history
from tether.daemon.context.history import History
from tether.daemon.context.prompt import subagent_prompt
from tether.daemon.providers.base import ModelClient, ModelError, ModelResponse
from tether.daemon.sessions.context import compaction_failed, compaction_item
from tether.daemon.sessions.session import Session, new_id
from tether.daemon.tools.base import ReadVersions, ToolContext, ToolFailure, ToolOutput, ToolParams
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.task import SubagentKind, TaskParams
from tether.daemon.turn.loop import AfterTool, Diagnose, Gate, TurnLoop
from tether.protocol.events import Usage
from tether.protocol.items import AgentMessage, AnyItem, Subagent, ToolCall
from tether.protocol.session import QueuedInput

MAX_RUNNING = 4
MAX_PER_TURN = 12
MAX_STEPS = 40
NO_REPORT = "(no report)"

EXPLORE_TOOLS = (
    "read_file",
    "grep",
    "glob",
    "list_dir",
    "find_definition",
    "find_references",
    "symbols",
    "hover",
    "skill",
)
GENERAL_TOOLS = (*EXPLORE_TOOLS, "edit_file", "write_file", "rename_symbol", "run_command")
TOOLS: Mapping[SubagentKind, tuple[str, ...]] = {
    "explore": EXPLORE_TOOLS,
    "general": GENERAL_TOOLS,
}


class ItemSink(Protocol):
    """Where the turn's items go (the session's event stream)."""

    def item_started(self, item: AnyItem) -> None: ...
    def item_delta(self, item_id: str, delta: str) -> None: ...
    def item_updated(self, item: AnyItem) -> None: ...
    def item_completed(self, item: AnyItem) -> None: ...
    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None: ...


class GateFactory(Protocol):
    def __call__(
        self, tools: ToolRegistry, subagent: str, context: Callable[[ToolCall], ToolContext]
    ) -> Gate:
        """The permission gate for a subagent's calls: `tools` are its own, `subagent` names
        it in approvals, `context` makes its calls' contexts (for edit previews)."""
        ...


ContextFactory = Callable[[ToolCall, ReadVersions], ToolContext]
"""Makes the context of a subagent's call, over the subagent's own read versions."""


class Subagents:
    """The subagents of one turn (see the module rules); the `SubagentRunner` of its tools."""

    def __init__(
        self,
        *,
        session: Session,
        turn_id: str,
        sink: ItemSink,
        tools: ToolRegistry,
        lease: Callable[[], AbstractAsyncContextManager[ModelClient]],
        model: str,
        gate: GateFactory,
        context: ContextFactory,
        workspace: Path,
        max_steps: int = MAX_STEPS,
        diagnose: Diagnose | None = None,
        window: int = 65536,
        max_output: int = 8192,
        after_tool: Callable[[str], AfterTool] | None = None,
    ) -> None:
        """`lease` holds the subagents' model client (named `model`) while one runs;
        `max_steps` is the user's, capped at `MAX_STEPS`; `diagnose` reports language
        servers' errors after a general subagent's edits; `window` and `max_output` give
        its context budget; `after_tool(description)` what becomes of the results of a
        subagent's calls (the post_tool hooks)."""
        self.after_tool = after_tool
        self.session = session
        self.turn_id = turn_id
        self.sink = sink
        self.tools = tools
        self.lease = lease
        self.model = model
        self.gate = gate
        self.context = context
        self.workspace = workspace
        self.max_steps = min(max_steps, MAX_STEPS)
        self.diagnose = diagnose
        self.window = window
        self.max_output = max_output
        self.limiter = trio.CapacityLimiter(MAX_RUNNING)
        self.started = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._prompts: dict[SubagentKind, str] = {}
        self._toolsets: dict[SubagentKind, _SubagentTools] = {}

    def usage(self) -> Usage:
        """The tokens every subagent of the turn took so far."""
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)

    async def run(self, params: TaskParams, ctx: ToolContext) -> ToolOutput:
        if self.started >= MAX_PER_TURN:
            raise ToolFailure(
                f"Not started: a turn may start at most {MAX_PER_TURN} subagents, and this one "
                "has. Do the rest yourself, or finish the turn and continue in the next."
            )
        self.started += 1
        parent_id = ctx.item_id
        info = Subagent(
            description=params.description, subagent_type=params.subagent_type, model=self.model
        )
        try:
            self.limiter.acquire_nowait()
        except trio.WouldBlock:
            self._update(parent_id, info)
            await self.limiter.acquire()
        try:
            info = msgspec.structs.replace(info, state="running")
            self._update(parent_id, info)
            return await self._run(params, parent_id, info)
        finally:
            self.limiter.release()

    async def _run(self, params: TaskParams, parent_id: str, info: Subagent) -> ToolOutput:
        kind = params.subagent_type
        tools = self._tools(kind)
        history = History(await self._prompt(kind))
        history.add_user(params.prompt)
        versions = ReadVersions()

        def context(item: ToolCall) -> ToolContext:
            return self.context(item, versions)

        nested = _NestedSink(self.sink, parent_id)
        async with self.lease() as model:
            loop = TurnLoop(
                model=model,
                tools=tools,
                tool_context=context,
                history=history,
                sink=nested,
                new_id=lambda: new_id("i"),
                gate=self.gate(tools.registry, params.description, context),
                compactor=_Compactor(history, model, tools, self.window, self.max_output),
                diagnose=self.diagnose if kind == "general" else None,
                max_steps=self.max_steps,
                after_tool=self.after_tool(params.description) if self.after_tool else None,
            )
            try:
                outcome = await loop.run()
            finally:
                self.input_tokens += loop.input_tokens
                self.output_tokens += loop.output_tokens
        done = msgspec.structs.replace(
            info,
            state="done",
            model_calls=loop.model_calls,
            input_tokens=loop.input_tokens,
            output_tokens=loop.output_tokens,
        )
        if outcome.status == "failed":
            why = outcome.error.message if outcome.error is not None else "it failed"
            raise ToolFailure(f"The subagent failed: {why}")
        report = nested.replies.get(loop.model_calls, "").strip()
        if outcome.status == "paused":
            note = f"[the subagent stopped after {self.max_steps} model calls, before it finished]"
            report = f"{report}\n\n{note}" if report else note
        return ToolOutput(text=report or NO_REPORT, subagent=done)

    def _update(self, parent_id: str, info: Subagent) -> None:
        turn = self.session.turn(self.turn_id)
        item = turn.items.get(parent_id) if turn is not None else None
        if isinstance(item, ToolCall):
            self.sink.item_updated(msgspec.structs.replace(item, subagent=info))

    async def _prompt(self, kind: SubagentKind) -> str:
        prompt = self._prompts.get(kind)
        if prompt is None:
            # It reads the file system (the git branch, the top-level entries).
            prompt = await trio.to_thread.run_sync(subagent_prompt, self.workspace, kind)
            self._prompts[kind] = prompt
        return prompt

    def _tools(self, kind: SubagentKind) -> "_SubagentTools":
        tools = self._toolsets.get(kind)
        if tools is None:
            tools = self._toolsets[kind] = _SubagentTools(self.tools, kind)
        return tools


class _SubagentTools:
    """A subagent's tools (a `ToolRunner`): a call of one of the agent's tools that it lacks
    is refused naming the tools it has."""

    def __init__(self, every: ToolRegistry, kind: SubagentKind) -> None:
        self.registry = every.subset(TOOLS[kind])
        self.kind = kind
        self.toolset = self.registry.toolset
        self._every = set(every.names)

    def validate(self, name: str, arguments: str) -> ToolParams | str:
        if name in self._every and name not in self.registry.names:
            return (
                f"{name} is not available to an {self.kind} subagent; its tools are "
                f"{', '.join(self.registry.names)}. Do the task with them, or say in your "
                "report what is left for the agent that started you."
            )
        return self.registry.validate(name, arguments)

    def is_read_only(self, name: str) -> bool:
        return self.registry.is_read_only(name)

    def runs_concurrently(self, name: str, params: ToolParams) -> bool:
        return self.registry.runs_concurrently(name, params)

    def edited_path(self, name: str, params: ToolParams) -> Path | None:
        return self.registry.edited_path(name, params)

    async def run(self, name: str, params: ToolParams, ctx: ToolContext) -> ToolResult:
        return await self.registry.run(name, params, ctx)


class _NestedSink:
    """A subagent's `TurnSink`: its items go to the turn's stream under the task call; it
    takes no queued messages (they are the agent's) and keeps no todo list."""

    def __init__(self, sink: ItemSink, parent_id: str) -> None:
        self.sink = sink
        self.parent_id = parent_id
        self.replies: dict[int, str] = {}
        """The text of each model call's reply (by step), for the report."""

    def _nest(self, item: AnyItem) -> AnyItem:
        return msgspec.structs.replace(item, parent_item_id=self.parent_id)

    def item_started(self, item: AnyItem) -> None:
        self.sink.item_started(self._nest(item))

    def item_delta(self, item_id: str, delta: str) -> None:
        self.sink.item_delta(item_id, delta)

    def item_completed(self, item: AnyItem) -> None:
        if isinstance(item, AgentMessage) and not item.superseded:
            self.replies[item.step] = item.text
        self.sink.item_completed(self._nest(item))

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        self.sink.retrying(attempt, max_attempts, delay, reason)

    def take_queued(self) -> list[QueuedInput]:
        return []

    def open_todos(self) -> list[str]:
        return []


class _Compactor:
    """A subagent's context budget: the compaction ladder over its own history (its items
    nest under the task call like the rest)."""

    def __init__(
        self,
        history: History,
        model: ModelClient,
        tools: _SubagentTools,
        window: int,
        max_output: int,
    ) -> None:
        self.model = model
        self.meter = TokenMeter(
            history.messages, budget=context_budget(window, max_output), tools=tools.toolset
        )

    async def before_call(self, history: History, *, new_turn: bool) -> list[AnyItem]:
        try:
            records = await compact_history(history, self.meter, self.model)
        except (ModelError, CompactionError) as exc:
            return [compaction_failed("the subagent's earlier work", exc)]
        return [compaction_item(r) for r in records]

    def after_call(self, response: ModelResponse) -> None:
        self.meter.record(response.usage)
