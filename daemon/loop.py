"""The turn loop: call the model, run the tools it asks for, repeat until it answers without
tools or the step budget runs out.

It depends only on three seams: a `ModelClient`, a `ToolRegistry` and a `TurnSink` that
receives items as they start, stream and complete. It does no I/O of its own and never raises
for an expected failure: a model error ends the turn as `failed` with a notice saying what to
fix; a bad tool call becomes a result the model can act on. Cancellation (the turn's cancel
scope) propagates as `trio.Cancelled` after every open tool call has been closed as cancelled
and answered in the history.

Scheduling: consecutive read-only calls run concurrently; any other call runs alone, in the
order the model asked; results join the history in the original order.
"""

from collections.abc import Callable
from typing import Literal, Protocol

import msgspec
import trio

from tether.daemon.history import History
from tether.daemon.providers.base import (
    ModelClient,
    ModelError,
    ModelRequest,
    ToolCallRequest,
)
from tether.daemon.tools.base import ToolContext, ToolParams
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.protocol.events import TurnError, Usage
from tether.protocol.items import AgentMessage, AnyItem, Notice, Reasoning, ToolCall, UserMessage
from tether.protocol.session import QueuedInput

CANCELLED_RESULT = "[cancelled by the user before it finished]"

EndStatus = Literal["completed", "failed", "paused"]


class TurnSink(Protocol):
    def item_started(self, item: AnyItem) -> None: ...
    def item_delta(self, item_id: str, delta: str) -> None: ...
    def item_completed(self, item: AnyItem) -> None: ...
    def take_queued(self) -> list[QueuedInput]:
        """User messages sent while the turn ran, to join at the next step."""
        ...


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    status: EndStatus
    usage: Usage
    error: TurnError | None = None


class TurnLoop:
    def __init__(
        self,
        *,
        model: ModelClient,
        tools: ToolRegistry,
        tool_context: ToolContext,
        history: History,
        sink: TurnSink,
        new_id: Callable[[], str],
        max_steps: int = 60,
    ) -> None:
        self.model = model
        self.tools = tools
        self.tool_context = tool_context
        self.history = history
        self.sink = sink
        self.new_id = new_id
        self.max_steps = max_steps
        self.input_tokens = 0
        self.output_tokens = 0
        self._open_calls: dict[str, ToolCall] = {}
        self._stream: _StreamToItems | None = None

    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)

    async def run(self) -> TurnOutcome:
        """Run to the end of the turn. Raises only `trio.Cancelled`."""
        try:
            return await self._run()
        except trio.Cancelled:
            if self._stream is not None:
                self._stream.finish()
            self._close_open_calls()
            raise

    def _take_queued(self) -> bool:
        queued = self.sink.take_queued()
        for entry in queued:
            item = UserMessage(id=entry.input_id, text=entry.text)
            self.sink.item_started(item)
            self.sink.item_completed(item)
            self.history.add_user(entry.text)
        return bool(queued)

    async def _run(self) -> TurnOutcome:
        step = 0
        while True:
            self._take_queued()
            if step >= self.max_steps:
                self._notice(
                    "warning",
                    f"Paused after {self.max_steps} model calls. Send `continue` to go on.",
                    "step_budget",
                )
                return TurnOutcome(status="paused", usage=self.usage())
            step += 1
            stream = self._stream = _StreamToItems(self.sink, self.new_id, step)
            request = ModelRequest(messages=self.history.messages, tools=self.tools.toolset)
            try:
                response = await self.model.complete(request, stream)
            except ModelError as exc:
                stream.finish()
                self._notice("error", exc.message, exc.code)
                return TurnOutcome(
                    status="failed",
                    usage=self.usage(),
                    error=TurnError(code=exc.code, message=exc.message),
                )
            stream.finish()
            self.input_tokens += response.usage.input_tokens
            self.output_tokens += response.usage.output_tokens
            self.history.add_assistant(response.text, response.tool_calls)
            if not response.tool_calls:
                if self._take_queued():
                    continue
                return TurnOutcome(status="completed", usage=self.usage())
            await self._run_tools(response.tool_calls, step)

    # --- tools ----------------------------------------------------------------------------

    async def _run_tools(self, calls: list[ToolCallRequest], step: int) -> None:
        prepared: list[tuple[ToolCall, ToolParams | str]] = []
        for call in calls:
            item = ToolCall(
                id=self.new_id(),
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                step=step,
            )
            self._open_calls[item.id] = item
            self.sink.item_started(item)
            prepared.append((item, self.tools.validate(call.name, call.arguments)))
        results: dict[str, ToolResult] = {}
        for group in self._schedule(prepared):
            if len(group) == 1:
                item, params = group[0]
                results[item.id] = await self._run_one(item, params)
            else:
                async with trio.open_nursery() as nursery:
                    for item, params in group:
                        nursery.start_soon(self._run_into, item, params, results)
        for item, _ in prepared:
            result = results[item.id]
            self.history.add_tool_result(item.call_id, result.output)

    def _schedule(
        self, prepared: list[tuple[ToolCall, ToolParams | str]]
    ) -> list[list[tuple[ToolCall, ToolParams | str]]]:
        """Group consecutive read-only calls (and invalid ones, which run nothing); every
        other call is a group of its own."""
        groups: list[list[tuple[ToolCall, ToolParams | str]]] = []
        last_parallel = False
        for entry in prepared:
            item, params = entry
            parallel = isinstance(params, str) or self.tools.is_read_only(item.tool)
            if parallel and last_parallel:
                groups[-1].append(entry)
            else:
                groups.append([entry])
            last_parallel = parallel
        return groups

    async def _run_into(
        self, item: ToolCall, params: ToolParams | str, results: dict[str, ToolResult]
    ) -> None:
        results[item.id] = await self._run_one(item, params)

    async def _run_one(self, item: ToolCall, params: ToolParams | str) -> ToolResult:
        if isinstance(params, str):
            result = ToolResult(status="failed", output=params)
        else:
            result = await self.tools.run(item.tool, params, self.tool_context)
        done = msgspec.structs.replace(item, status=result.status, output=result.output)
        self._open_calls.pop(item.id, None)
        self.sink.item_completed(done)
        return result

    def _close_open_calls(self) -> None:
        for item in self._open_calls.values():
            self.sink.item_completed(
                msgspec.structs.replace(item, status="cancelled", output=CANCELLED_RESULT)
            )
            self.history.add_tool_result(item.call_id, CANCELLED_RESULT)
        self._open_calls.clear()
        self.history.close_open_calls()

    def _notice(self, level: Literal["info", "warning", "error"], message: str, code: str) -> None:
        item = Notice(id=self.new_id(), level=level, message=message, code=code)
        self.sink.item_started(item)
        self.sink.item_completed(item)


class _StreamToItems:
    """Turns streamed text into an agent message item (and reasoning into a reasoning item),
    each started on its first delta and completed when the model call ends."""

    def __init__(self, sink: TurnSink, new_id: Callable[[], str], step: int) -> None:
        self.sink = sink
        self.new_id = new_id
        self.step = step
        self.message: AgentMessage | None = None
        self.reasoning: Reasoning | None = None
        self.text: list[str] = []
        self.thoughts: list[str] = []

    def on_text(self, delta: str) -> None:
        if self.message is None:
            self.message = AgentMessage(id=self.new_id(), step=self.step)
            self.sink.item_started(self.message)
        self.text.append(delta)
        self.sink.item_delta(self.message.id, delta)

    def on_reasoning(self, delta: str) -> None:
        if self.reasoning is None:
            self.reasoning = Reasoning(id=self.new_id(), step=self.step)
            self.sink.item_started(self.reasoning)
        self.thoughts.append(delta)
        self.sink.item_delta(self.reasoning.id, delta)

    def finish(self) -> None:
        if self.reasoning is not None:
            self.sink.item_completed(
                msgspec.structs.replace(self.reasoning, text="".join(self.thoughts))
            )
            self.reasoning = None
        if self.message is not None:
            self.sink.item_completed(msgspec.structs.replace(self.message, text="".join(self.text)))
            self.message = None
