"""The turn loop: call the model, run the tools it asks for, repeat until it answers without
tools or the step budget runs out.

It depends only on seams: a `ModelClient`, a `ToolRunner`, a `Gate` that decides whether a
call may run (and may wait for a person), a factory of per-call `ToolContext`s, and a
`TurnSink` that receives items and events. It does no I/O of its own and never raises for an
expected failure: a model error ends the turn as `failed` with a notice saying what to fix; a
bad tool call or a denial becomes a result the model can act on. Cancellation (the turn's
cancel scope) propagates after every open tool call has been closed as cancelled and answered
in the history; an unexpected exception (a bug) propagates too, after they are closed as
failed.

Rules:
- Scheduling: consecutive read-only calls run concurrently (with calls that change nothing
  themselves, such as explore subagents); any other call runs alone, in the order the model
  asked; results join the history in the original order.
- Retries: a retryable model error (busy server, dropped stream) is retried up to 3 times
  after ~1, 2, 4 s (±25% jitter); the server's Retry-After wins, and one over 60 s fails the
  turn instead. A server silent for the whole silence timeout is retried once only (a second
  silence fails the turn), so a hung server costs two timeouts, not four. Each of those waits
  is announced and cancellable. A server that cannot be reached (connection refused, DNS,
  TLS) is tried once more after 0.25 s, unannounced, then fails the turn with its one message:
  nothing listening now is rarely listening a few seconds later, and the message says what to
  fix. What a failed attempt had streamed is completed as `superseded`: the retry's reply
  replaces it, and it never joins the history.
- A reply cut off at the output limit, with no tool calls, is continued at most twice.
- The third identical call with an identical result gets one note asking for another approach
  (once per turn).
- A final answer while todo items are open gets one reminder per turn.
- Messages queued while the turn runs join at the next step; one waiting when the model
  answers keeps the turn going.
"""

import random
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar, cast

import msgspec
import trio

from tether.daemon.context.history import History
from tether.daemon.logs.log import get_logger
from tether.daemon.providers.base import (
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelTimeout,
    ModelUnreachable,
    ToolCallRequest,
)
from tether.daemon.tools.base import ToolContext, ToolParams
from tether.daemon.tools.registry import ToolResult
from tether.daemon.turn.tool_runner import ToolRunner
from tether.protocol.enums import NoticeCode
from tether.protocol.events import TurnError, Usage
from tether.protocol.items import AgentMessage, AnyItem, Notice, Reasoning, ToolCall, UserMessage
from tether.protocol.session import QueuedInput

CANCELLED_RESULT = "[cancelled by the user before it finished]"
FAILED_RESULT = "[tether failed before this call finished]"
REPEAT_NOTE = (
    "\n\n[tether: this exact call has now returned the same result three times. Repeating it "
    "will not help; change approach.]"
)
CONTINUE_PROMPT = (
    "Your last reply was cut off at the output limit. Continue exactly where it stopped, "
    "without repeating anything."
)
MAX_RETRIES = 3
RETRY_BASE_SECONDS = 1.0
MAX_RETRY_AFTER = 60.0
MAX_SILENCES = 2
"""Silence timeouts one model call may meet before the turn fails (each costs a whole timeout)."""
MAX_UNREACHABLE = 2
"""Attempts at a model server that cannot be reached before the turn fails."""
UNREACHABLE_RETRY_SECONDS = 0.25
MAX_CONTINUATIONS = 2
REPEAT_THRESHOLD = 3

EndStatus = Literal["completed", "failed", "paused"]

log = get_logger(__name__)


class TurnSink(Protocol):
    def item_started(self, item: AnyItem) -> None: ...
    def item_delta(self, item_id: str, delta: str) -> None: ...
    def item_completed(self, item: AnyItem) -> None: ...
    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None: ...
    def take_queued(self) -> list[QueuedInput]:
        """User messages sent while the turn ran, with their context; the loop adds every
        one to the history at once."""
        ...

    def open_todos(self) -> list[str]:
        """The todo items not yet completed."""
        ...


class Compactor(Protocol):
    """Keeps the conversation within the context budget (see tether.daemon.context.compact)."""

    async def before_call(self, history: History, *, new_turn: bool) -> list[AnyItem]:
        """Compact if needed before a model call; return the items to show for it."""
        ...

    def after_call(self, response: ModelResponse) -> None:
        """Take the provider's count of the prompt just sent."""
        ...


class Diagnose(Protocol):
    async def __call__(self, item: ToolCall, paths: list[Path]) -> str:
        """Sync these changed files to the language servers and return the error report to
        append to `item`'s result ("" when there is nothing to report). Bounded in time."""
        ...


class Gate(Protocol):
    async def check(self, item: ToolCall, params: ToolParams) -> str | None:
        """None when the call may run; otherwise the result to give the model instead.
        May wait for a person's answer; cancelling it resolves the question as denied."""
        ...


class AfterTool(Protocol):
    async def __call__(self, item: ToolCall, params: ToolParams, result: ToolResult) -> ToolResult:
        """What becomes of the result of a call that ran (the user's post_tool hooks)."""
        ...


class OpenGate:
    """A gate that lets everything through (tests of the loop alone)."""

    async def check(self, item: ToolCall, params: ToolParams) -> str | None:
        return None


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    status: EndStatus
    usage: Usage
    error: TurnError | None = None


class TurnLoop:
    def __init__(
        self,
        *,
        model: ModelClient,
        tools: ToolRunner,
        tool_context: Callable[[ToolCall], ToolContext],
        history: History,
        sink: TurnSink,
        new_id: Callable[[], str],
        gate: Gate | None = None,
        compactor: Compactor | None = None,
        diagnose: Diagnose | None = None,
        max_steps: int = 60,
        after_tool: AfterTool | None = None,
    ) -> None:
        self.compactor = compactor
        self.after_tool = after_tool
        self.diagnose = diagnose
        self._changed: list[Path] = []
        self._last_edit: str | None = None
        self.model = model
        self.tools = tools
        self.tool_context = tool_context
        self.history = history
        self.sink = sink
        self.new_id = new_id
        self.gate: Gate = gate or OpenGate()
        self.max_steps = max_steps
        self.input_tokens = 0
        self.output_tokens = 0
        self.tokens_estimated = False
        self.model_calls = 0
        self._open_calls: dict[str, ToolCall] = {}
        self._stream: _StreamToItems | None = None
        self._seen_calls: dict[tuple[str, str, str], int] = {}
        self._repeat_noted = False
        self._todo_reminded = False

    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)

    async def run(self) -> TurnOutcome:
        """Run to the end of the turn. Raises only cancellation (`trio.Cancelled`, or an
        exception group of them when it arrives through a tool's nursery) and, for a bug,
        whatever the bug raised; either way every item it opened is completed first."""
        try:
            return await self._run()
        except BaseException as exc:
            # Every path out of the turn completes what it opened: a cancelled nursery inside
            # a tool raises a group, not a bare Cancelled, and a bug raises anything at all.
            if self._stream is not None:
                self._stream.finish()
                self._stream = None
            self._close_open_calls(cancelled=split_cancelled(exc)[1] is None)
            raise

    def _take_queued(self) -> bool:
        queued = self.sink.take_queued()
        for entry in queued:
            item = UserMessage(
                id=entry.input_id, text=entry.text, context=entry.context, images=entry.images
            )
            self.sink.item_started(item)
            self.sink.item_completed(item)
            self.history.add_user(entry.text, entry.context, entry.images)
        return bool(queued)

    async def _run(self) -> TurnOutcome:
        continuations = 0
        while True:
            self._take_queued()
            if self.model_calls >= self.max_steps:
                self._notice(
                    "warning",
                    f"Paused after {self.max_steps} model calls. Send `continue` to go on.",
                    "step_budget",
                )
                return TurnOutcome(status="paused", usage=self.usage())
            self.model_calls += 1
            response = await self._call_model()
            if isinstance(response, TurnOutcome):
                return response
            self.history.add_assistant(response.text, response.tool_calls)
            if response.tool_calls:
                await self._run_tools(response.tool_calls, self.model_calls)
                continue
            if response.finish_reason == "length" and continuations < MAX_CONTINUATIONS:
                continuations += 1
                self._notice(
                    "info",
                    f"The reply hit the output limit; asking the model to continue "
                    f"({continuations}/{MAX_CONTINUATIONS}).",
                    "output_limit",
                )
                self.history.add_user(CONTINUE_PROMPT)
                continue
            if self._take_queued():
                continue
            open_todos = self.sink.open_todos()
            if open_todos and not self._todo_reminded:
                self._todo_reminded = True
                listing = "\n".join(f"- {todo}" for todo in open_todos)
                self.history.add_user(
                    "Your todo list still has open items:\n"
                    f"{listing}\nFinish them, or update the list with todo_write if they are "
                    "done or no longer needed, then give your final answer."
                )
                self._notice("info", "Reminded the model of its open todo items.", "todo_reminder")
                continue
            return TurnOutcome(status="completed", usage=self.usage())

    async def _call_model(self) -> ModelResponse | TurnOutcome:
        if self.compactor is not None:
            items = await self.compactor.before_call(self.history, new_turn=self.model_calls == 1)
            for item in items:
                self.sink.item_started(item)
                self.sink.item_completed(item)
        attempt = 0
        silences = 0
        unreachable = 0
        while True:
            stream = self._stream = _StreamToItems(self.sink, self.new_id, self.model_calls)
            request = ModelRequest(messages=self.history.messages, tools=self.tools.toolset)
            started = trio.current_time()
            try:
                response = await self.model.complete(request, stream)
            except ModelError as exc:
                self._stream = None
                silences += isinstance(exc, ModelTimeout)
                unreachable += isinstance(exc, ModelUnreachable)
                delay = self._retry_delay(exc, attempt, silences, unreachable)
                log.warning(
                    "model call failed",
                    provider=self.model.provider,
                    model=self.model.model,
                    step=self.model_calls,
                    code=exc.code,
                    error=exc.message,
                    ms=_ms_since(started),
                    retries=attempt,
                    retry_in=None if delay is None else round(delay, 3),
                )
                if delay is None:
                    stream.finish()
                    message = exc.message
                    if isinstance(exc, ModelTimeout) and silences >= MAX_SILENCES:
                        message += " It stayed silent twice, so it is not retried again."
                    self._notice("error", message, exc.code)
                    return TurnOutcome(
                        status="failed",
                        usage=self.usage(),
                        error=TurnError(code=exc.code, message=message),
                    )
                stream.finish(superseded=True)
                attempt += 1
                if not isinstance(exc, ModelUnreachable):
                    reason = exc.message
                    if isinstance(exc, ModelTimeout):
                        reason += " Retrying once: if it stays silent again, the turn fails."
                    self.sink.retrying(attempt, MAX_RETRIES, delay, reason)
                await trio.sleep(delay)
                continue
            stream.finish()
            self._stream = None
            log.info(
                "model call",
                provider=self.model.provider,
                model=self.model.model,
                step=self.model_calls,
                status="ok",
                finish=response.finish_reason,
                ms=_ms_since(started),
                retries=attempt,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                tool_calls=len(response.tool_calls),
            )
            if self.compactor is not None:
                self.compactor.after_call(response)
            self.input_tokens += response.usage.input_tokens
            self.output_tokens += response.usage.output_tokens
            self.tokens_estimated = self.tokens_estimated or response.usage.estimated
            for warning in response.warnings:
                self._notice("warning", warning, "model_stream")
            return response

    @staticmethod
    def _retry_delay(
        exc: ModelError, attempt: int, silences: int = 0, unreachable: int = 0
    ) -> float | None:
        """Seconds to wait before the next try, or None to give up. `silences` and
        `unreachable`: the silence timeouts and the failures to reach the server met so far in
        this model call, `exc` included."""
        if not exc.retryable or attempt >= MAX_RETRIES or silences >= MAX_SILENCES:
            return None
        if isinstance(exc, ModelUnreachable):
            return UNREACHABLE_RETRY_SECONDS if unreachable < MAX_UNREACHABLE else None
        if exc.retry_after is not None:
            return exc.retry_after if exc.retry_after <= MAX_RETRY_AFTER else None
        return RETRY_BASE_SECONDS * 2**attempt * random.uniform(0.75, 1.25)

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
        # Diagnostics for the batch's edits go with the result of its last edit.
        self._changed = []
        self._last_edit = None
        for item, params in prepared:
            if isinstance(params, str):
                continue
            if self.tools.edited_path(item.tool, params) is not None:
                self._last_edit = item.id
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
            for image in result.images:
                self.history.image_data[image.ref.sha256] = image.data
            refs = [image.ref for image in result.images]
            self.history.add_tool_result(item.call_id, result.output, refs)

    def _schedule(
        self, prepared: list[tuple[ToolCall, ToolParams | str]]
    ) -> list[list[tuple[ToolCall, ToolParams | str]]]:
        """Group consecutive read-only calls (and invalid ones, which run nothing); every
        other call is a group of its own."""
        groups: list[list[tuple[ToolCall, ToolParams | str]]] = []
        last_parallel = False
        for entry in prepared:
            item, params = entry
            parallel = isinstance(params, str) or self.tools.runs_concurrently(item.tool, params)
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
        duration = 0.0
        # What the call came to, for the log (the arguments never go there at info).
        outcome = "invalid"
        if isinstance(params, str):
            result = ToolResult(status="failed", output=params)
        else:
            denial = await self.gate.check(item, params)
            outcome = "denied"
            if denial is not None:
                result = ToolResult(status="failed", output=denial)
            else:
                started = trio.current_time()
                result = await self.tools.run(item.tool, params, self.tool_context(item))
                duration = trio.current_time() - started
                result = await self._after_edit(item, params, result)
                if self.after_tool is not None:
                    result = await self.after_tool(item, params, result)
                outcome = result.status
        log.info(
            "tool call",
            tool=item.tool,
            call=item.id,
            outcome=outcome,
            exit_code=result.exit_code,
            ms=round(duration * 1000, 3),
        )
        result = self._note_repeats(item, result)
        done = msgspec.structs.replace(
            item,
            status=result.status,
            output=result.output,
            exit_code=result.exit_code,
            diff=result.diff,
            duration_seconds=round(duration, 3),
            subagent=result.subagent,
            images=[image.ref for image in result.images],
        )
        self._open_calls.pop(item.id, None)
        self.sink.item_completed(done)
        return result

    async def _after_edit(
        self, item: ToolCall, params: ToolParams, result: ToolResult
    ) -> ToolResult:
        path = self.tools.edited_path(item.tool, params)
        if self.diagnose is None or path is None:
            return result
        if result.status == "completed":
            self._changed += [path, *result.edited]
        if item.id != self._last_edit or not self._changed:
            return result
        report = await self.diagnose(item, self._changed)
        if not report:
            return result
        return msgspec.structs.replace(result, output=f"{result.output}\n\n{report}")

    def _note_repeats(self, item: ToolCall, result: ToolResult) -> ToolResult:
        key = (item.tool, item.arguments, result.output)
        count = self._seen_calls[key] = self._seen_calls.get(key, 0) + 1
        if count >= REPEAT_THRESHOLD and not self._repeat_noted:
            self._repeat_noted = True
            return msgspec.structs.replace(result, output=result.output + REPEAT_NOTE)
        return result

    def _close_open_calls(self, *, cancelled: bool = True) -> None:
        status: Literal["cancelled", "failed"] = "cancelled" if cancelled else "failed"
        output = CANCELLED_RESULT if cancelled else FAILED_RESULT
        for item in self._open_calls.values():
            self.sink.item_completed(msgspec.structs.replace(item, status=status, output=output))
            self.history.add_tool_result(item.call_id, output)
        self._open_calls.clear()
        self.history.close_open_calls()

    def _notice(
        self, level: Literal["info", "warning", "error"], message: str, code: NoticeCode
    ) -> None:
        item = Notice(id=self.new_id(), level=level, message=message, code=code)
        self.sink.item_started(item)
        self.sink.item_completed(item)


def _ms_since(started: float) -> float:
    return round((trio.current_time() - started) * 1000, 3)


def split_cancelled(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """(the cancellation in `exc`, everything else in it); either may be None. A bare
    `trio.Cancelled`, or a group holding nothing else, comes back whole as the first."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        cancelled, rest = group.split(trio.Cancelled)
        return (group, None) if rest is None else (cancelled, rest)
    if isinstance(exc, trio.Cancelled):
        return exc, None
    return None, exc


_Streamed = TypeVar("_Streamed", AgentMessage, Reasoning)


class _StreamedItem(Generic[_Streamed]):
    """One item the model's stream writes: made and started on its first delta, completed
    with the whole text by `finish`."""

    def __init__(self, sink: TurnSink, make: Callable[[], _Streamed]) -> None:
        self.sink = sink
        self.make = make
        self.item: _Streamed | None = None
        self.parts: list[str] = []

    def add(self, delta: str) -> None:
        if self.item is None:
            self.item = self.make()
            self.sink.item_started(self.item)
        self.parts.append(delta)
        self.sink.item_delta(self.item.id, delta)

    def finish(self, *, superseded: bool) -> None:
        if self.item is not None:
            self.sink.item_completed(
                msgspec.structs.replace(self.item, text="".join(self.parts), superseded=superseded)
            )
            self.item = None


class _StreamToItems:
    """Turns streamed text into an agent message item (and reasoning into a reasoning item),
    each started on its first delta and completed when the model call ends (`superseded` when
    the call broke off and is retried)."""

    def __init__(self, sink: TurnSink, new_id: Callable[[], str], step: int) -> None:
        self.message = _StreamedItem(sink, lambda: AgentMessage(id=new_id(), step=step))
        self.reasoning = _StreamedItem(sink, lambda: Reasoning(id=new_id(), step=step))

    def on_text(self, delta: str) -> None:
        self.message.add(delta)

    def on_reasoning(self, delta: str) -> None:
        self.reasoning.add(delta)

    def finish(self, *, superseded: bool = False) -> None:
        self.reasoning.finish(superseded=superseded)
        self.message.finish(superseded=superseded)
