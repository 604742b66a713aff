"""Compaction: keeping the conversation within the context budget, cheapest step first.

The ladder:

1. `elide_old_tool_results`: keep the newest 6 tool results whole; replace the content of
   older ones over 600 characters with a stub that says what was elided and how to get it back.
2. `elide_before_new_turn`: when a new turn starts, stub every earlier tool result over 1,500
   characters, whatever the budget (the output of a finished turn is rarely read again, and the
   turn's own summary and the assistant's text keep what mattered).
3. `summarise`: ask the model for a structured summary of the older history (user requests,
   work done, important facts with path:line, current state, next steps) and put it in place
   of those messages, keeping the most recent ones verbatim. The model summarising is sent
   a line naming each image in place of the image, and the summary drops the images of the
   messages it replaces (only the newest messages, kept verbatim, keep theirs).

When each runs (`plan_compaction`, checked before every model call against `TokenMeter.used()`):

- step 2 on the first model call of every turn;
- step 1 once the prompt would use `ELIDE_AT` (50%) of the budget. Not earlier: every stub
  rewrites a message in the middle of the conversation, which ends the provider's prompt-cache
  hit at that message, and a small conversation loses nothing worth the miss. Gated this way,
  step 1 stubs results in batches (each time the whole results pile up past half the budget)
  rather than one at every step. When keeping 6 would still leave the prompt over the budget
  (large outputs in a small window: six 20 KB results are ~34k tokens), it keeps fewer, down to
  `MIN_KEEP_TOOL_RESULTS` (1), if that is enough: still no model call, and the summary it
  avoids would have dropped those results anyway. If even that is not enough, it keeps 6 and
  step 3 runs, so the summary sees the newest results whole;
- step 3 when, after steps 1 and 2, the prompt would still be over the budget (`SUMMARISE_AT`,
  100%), or when asked (`session/compact`). The budget already keeps room for the reply and a
  15% margin (see `budget`), and the check runs on the exact prompt about to be sent, so going
  up to it is safe. The part kept verbatim is at most `KEEP_RECENT_SHARE` (25%) of the budget,
  so a summary leaves about two thirds of the budget free before the next one.

Invariants:

- Message 0 (the system prompt) and the tool schemas are never touched, so the stable prompt
  prefix stays byte-identical across every step of a session.
- A message whose content changes drops its per-dialect encodings (`Message.cache`), so every
  provider encodes the new content.
- A stub depends only on the tool's name and the length of the text it replaces, and a stub is
  never stubbed again: the same history always compacts to the same bytes.
- Step 3 never separates an assistant message with tool calls from its results, and replaces
  nothing until the model has answered: cancelled or failed, it leaves the history as it was.
  It never makes the history longer: it asks the model only when the part it would replace is
  longer than an empty summary message, and keeps the history as it was when the summary
  message would not be shorter than that part.

Errors: `summarise` raises the model's `ModelError` as is, and `CompactionError` when the model
answers with no summary or the conversation changed while it was being summarised, or its
subclass `SummaryNotShorter` when the summary would not shorten the history.
"""

from collections.abc import Callable, Sequence

import msgspec

from tether.daemon.context.budget import (
    TokenMeter,
    message_chars,
    messages_chars,
    messages_tokens,
)
from tether.daemon.context.history import History, is_summary, summary_message
from tether.daemon.logs.log import get_logger
from tether.daemon.providers.base import (
    Message,
    ModelClient,
    ModelRequest,
    ModelUsage,
    QuietCallbacks,
)
from tether.daemon.providers.stream import CHARS_PER_TOKEN, estimate_tokens
from tether.daemon.truncate import cap_result
from tether.protocol.enums import CompactionStep, CompactionTrigger

log = get_logger(__name__)

KEEP_TOOL_RESULTS = 6
"""Step 1 keeps this many of the newest tool results whole."""
MIN_KEEP_TOOL_RESULTS = 1
"""When keeping 6 is not enough, step 1 keeps fewer, down to this, before step 3 is needed.
Equal to `KEEP_TOOL_RESULTS`, the ladder is exactly steps 1, 2, 3."""
ELIDE_THRESHOLD = 600
"""Step 1 stubs older tool results longer than this (characters)."""
TURN_ELIDE_THRESHOLD = 1500
"""Step 2 stubs earlier turns' tool results longer than this (characters)."""
ELIDE_AT = 0.5
"""Step 1 runs when the prompt would use this share of the budget."""
SUMMARISE_AT = 1.0
"""Step 3 runs when the prompt would still use more than this share after steps 1 and 2."""
KEEP_RECENT_SHARE = 0.25
"""Step 3 keeps at most this share of the budget of the newest messages verbatim."""
SUMMARY_REQUEST_RESULT_CAP = 2000
"""When the history to summarise does not fit the budget, its tool results are cut to this."""

STUB_PREFIX = "[tether elided "

SUMMARY_INSTRUCTION = """\
[tether: compacting the conversation] The conversation above is about to be replaced by a \
summary to save context; you will continue the work from the summary alone, plus the most \
recent messages. Write that summary now, with exactly these sections:

## User requests
Every request and instruction from the user, in order, with the exact wording where it matters \
(names, numbers, constraints, preferences). Mark each as done, in progress or open.

## Work done
What was done: files read, created or changed (and what changed), commands run and their \
outcome, decisions taken and why.

## Important facts
Facts needed to go on, each with where it comes from as path:line when there is one: \
definitions, signatures, error messages, failing tests, configuration values, conventions.

## Current state
Where the work stands: what works, what fails, what is half done.

## Next steps
What remains, in order, starting with what was about to happen.

If the conversation starts with an earlier summary, fold it in. Be specific and terse, invent \
nothing, and do not call tools: answer with the summary only."""


class CompactionError(Exception):
    """Summarising failed without a model error; the history was left as it was."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SummaryNotShorter(CompactionError):
    """The model's summary is no shorter than what it would replace; the history was left as
    it was (the conversation is too short for a summary to help)."""


class Elision(msgspec.Struct, frozen=True, kw_only=True):
    """What one elision step changed."""

    messages: int = 0
    """Tool results replaced by a stub."""
    chars_removed: int = 0


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    """The model's summary, as it wrote it."""
    replaced: int
    """Messages replaced by the summary message."""
    kept: int
    """Messages kept verbatim after it."""
    usage: ModelUsage
    """What the summarising call cost."""


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """One compaction that changed the history: what clients are shown."""

    step: CompactionStep
    trigger: CompactionTrigger
    tokens_before: int
    """The meter's `used()` before and after the step."""
    tokens_after: int
    budget: int
    messages: int
    """Tool results stubbed (steps 1 and 2) or messages summarised (step 3)."""
    kept: int = 0
    """Step 3: messages kept verbatim after the summary (see `History.replace_with_summary`)."""
    summary: str = ""
    usage: ModelUsage | None = None
    """The summarising call's usage (step 3)."""


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Which steps to apply before a model call, and the expected effect (in tokens)."""

    earlier_turns: bool
    old_tool_results: bool
    keep: int
    """How many of the newest tool results step 1 keeps whole."""
    summary: bool
    used: int
    """The meter's `used()` now."""
    expected: int
    """Expected tokens after the elision steps (before any summary)."""
    budget: int


# --- steps 1 and 2: stubs ------------------------------------------------------------------


def is_stub(content: str) -> bool:
    return content.startswith(STUB_PREFIX)


def stub_for(tool_name: str, content: str) -> str:
    """The stub that stands for `content`, a result of `tool_name` (deterministic)."""
    what = f"this {tool_name} result" if tool_name else "this tool result"
    again = f"call {tool_name} again" if tool_name else "call the tool again"
    return (
        f"{STUB_PREFIX}{len(content):,} characters of {what} to save context; {again} if you "
        "need them]"
    )


def _stub_candidates(messages: Sequence[Message], keep: int, threshold: int) -> list[int]:
    """Indexes of the tool results a stub would replace: all but the newest `keep` tool
    results, longer than `threshold`, not stubs already."""
    tool_indexes = [i for i, m in enumerate(messages) if m.role == "tool" and i > 0]
    older = tool_indexes[: max(len(tool_indexes) - keep, 0)]
    return [
        i
        for i in older
        if len(messages[i].content) > threshold and not is_stub(messages[i].content)
    ]


def _stub(messages: Sequence[Message], indexes: Sequence[int]) -> Elision:
    removed = 0
    for index in indexes:
        message = messages[index]
        stub = stub_for(message.tool_name, message.content)
        removed += len(message.content) - len(stub)
        message.content = stub
        message.cache.clear()
        message.chars = -1
    return Elision(messages=len(indexes), chars_removed=removed)


def _savings(messages: Sequence[Message], indexes: Sequence[int]) -> int:
    return sum(
        len(messages[i].content) - len(stub_for(messages[i].tool_name, messages[i].content))
        for i in indexes
    )


def elide_old_tool_results(
    history: History, *, keep: int = KEEP_TOOL_RESULTS, threshold: int = ELIDE_THRESHOLD
) -> Elision:
    """Step 1: replace, in place, the content of every tool result but the newest `keep` that
    is longer than `threshold` characters with a stub."""
    messages = history.messages
    return _stub(messages, _stub_candidates(messages, keep, threshold))


def elide_before_new_turn(history: History, *, threshold: int = TURN_ELIDE_THRESHOLD) -> Elision:
    """Step 2, for the start of a new turn (before or after its request joins the history):
    replace, in place, every tool result longer than `threshold` characters with a stub."""
    messages = history.messages
    return _stub(messages, _stub_candidates(messages, 0, threshold))


# --- step 3: summary -----------------------------------------------------------------------


def _is_valid_cut(messages: Sequence[Message], index: int) -> bool:
    """Whether `messages[1:index]` can be replaced while `messages[index:]` stay: no tool
    result may lose its call, and no call its results."""
    if index < len(messages) and messages[index].role == "tool":
        return False
    before = messages[index - 1]
    return not (before.role == "assistant" and before.tool_calls)


def summary_cut(messages: Sequence[Message], keep_recent_tokens: int) -> int | None:
    """Where step 3 cuts: `messages[1:cut]` are summarised, `messages[cut:]` kept verbatim.

    The earliest valid cut whose kept part is within `keep_recent_tokens` (estimated), so
    that as much as fits is kept; when nothing fits, everything is summarised (or, when the
    newest message is an assistant's unanswered calls, everything before it), except a user
    message the model has not answered yet: the request about to be sent is kept verbatim, or
    the model would answer a summary of it. None when there is nothing to summarise: nothing
    but the system prompt, perhaps an earlier summary, and that unanswered message.
    """
    first = 3 if len(messages) > 1 and is_summary(messages[1]) else 2
    last = len(messages)
    if last > first - 1 and messages[-1].role == "user" and not is_summary(messages[-1]):
        last -= 1  # the user's unanswered message
    if last < first:
        return None
    kept_chars = [0] * (len(messages) + 1)
    for index in range(len(messages) - 1, -1, -1):
        kept_chars[index] = kept_chars[index + 1] + message_chars(messages[index])
    fallback: int | None = None
    for index in range(first, last + 1):
        if not _is_valid_cut(messages, index):
            continue
        if estimate_tokens(kept_chars[index]) <= keep_recent_tokens:
            return index
        fallback = index
    return fallback


def _worthwhile_cut(messages: Sequence[Message], keep_recent_tokens: int) -> int | None:
    cut = summary_cut(messages, keep_recent_tokens)
    if cut is None:
        return None
    empty = message_chars(summary_message("", continues=cut < len(messages)))
    return cut if messages_chars(messages[1:cut]) > empty else None


def summary_worthwhile(history: History, keep_recent_tokens: int) -> bool:
    """Whether step 3 could shorten the history: there is something to summarise (see
    `summary_cut`) and it is longer than a summary message with no summary in it."""
    return _worthwhile_cut(history.messages, keep_recent_tokens) is not None


def _fit_for_summary(older: list[Message], limit_tokens: int | None) -> list[Message]:
    """The messages to summarise, made to fit `limit_tokens`: first tool results are cut
    (copies; the history is not touched), then the oldest messages are left out (an earlier
    summary excepted), at boundaries that keep calls with their results."""
    if limit_tokens is None or messages_tokens(older) <= limit_tokens:
        return older
    fitted = [
        Message(
            role=m.role,
            content=cap_result(m.content, SUMMARY_REQUEST_RESULT_CAP),
            tool_call_id=m.tool_call_id,
            tool_name=m.tool_name,
            images=m.images,  # so the summary is still told which images the result had
        )
        if m.role == "tool" and len(m.content) > SUMMARY_REQUEST_RESULT_CAP
        else m
        for m in older
    ]
    pinned = fitted[:1] if fitted and is_summary(fitted[0]) else []
    rest = fitted[len(pinned) :]
    limit_chars = limit_tokens * CHARS_PER_TOKEN - messages_chars(pinned)
    chars = messages_chars(rest)
    start = 0
    while start < len(rest) - 1 and (chars > limit_chars or rest[start].role == "tool"):
        chars -= message_chars(rest[start])
        start += 1
    return pinned + rest[start:]


def _images_named(messages: list[Message]) -> list[Message]:
    """The messages with each image replaced by a line naming it (copies; the history is not
    touched): the summary replaces them, so the model summarising is told what was shown
    rather than sent the images again. A tool result stays the answer to its call."""
    return [
        Message(
            role=m.role,
            content="\n".join([m.content, *(i.placeholder("attached here") for i in m.images)]),
            tool_call_id=m.tool_call_id,
            tool_name=m.tool_name,
        )
        if m.images
        else m
        for m in messages
    ]


async def summarise(
    history: History,
    model: ModelClient,
    *,
    keep_recent_tokens: int,
    request_budget: int | None = None,
) -> Summary | None:
    """Step 3: replace the older part of the history with a summary the model writes.

    The model gets the system prompt, the messages to summarise (cut to fit `request_budget`
    tokens when given) and `SUMMARY_INSTRUCTION` as the last user message, with no tools. The
    newest messages (see `summary_cut`) stay verbatim after the summary message. Returns None
    when there is nothing worth summarising (see `summary_worthwhile`; no model call is made).

    Raises `ModelError` from the model, `CompactionError` for an empty summary and
    `SummaryNotShorter` when the summary message would be no shorter than what it replaces.
    The history changes only after the model has answered, in one synchronous step: cancelling
    this closes the model's stream and leaves the history as it was, and so does every error.
    """
    messages = history.messages
    cut = _worthwhile_cut(messages, keep_recent_tokens)
    if cut is None:
        return None
    older = messages[1:cut]
    instruction = Message(role="user", content=SUMMARY_INSTRUCTION)
    limit = None
    if request_budget is not None:
        limit = request_budget - messages_tokens([messages[0]]) - messages_tokens([instruction])
    request = ModelRequest(
        messages=[messages[0], *_images_named(_fit_for_summary(older, limit)), instruction],
        tools=None,
    )
    response = await model.complete(request, QuietCallbacks())
    text = response.text.strip()
    if not text:
        raise CompactionError("The model answered with an empty summary; nothing was compacted.")
    now = history.messages[1:cut]
    if len(now) != len(older) or any(a is not b for a, b in zip(now, older, strict=True)):
        raise CompactionError("The conversation changed while it was being summarised.")
    kept = len(history.messages) - cut
    replaced_chars = messages_chars(older)
    if message_chars(summary_message(text, continues=kept > 0)) >= replaced_chars:
        raise SummaryNotShorter(
            f"The summary would not be shorter than the {len(older)} message(s) it replaces "
            f"({replaced_chars:,} characters); nothing was compacted."
        )
    history.replace_with_summary(text, kept=kept)
    return Summary(text=text, replaced=len(older), kept=kept, usage=response.usage)


# --- the ladder ----------------------------------------------------------------------------


def keep_recent_tokens(budget: int) -> int:
    """How much of the newest history step 3 keeps verbatim, for a budget."""
    return int(budget * KEEP_RECENT_SHARE)


def plan_compaction(
    history: History, meter: TokenMeter, *, new_turn: bool = False, force_summary: bool = False
) -> CompactionPlan:
    """Decide the steps to apply before a model call (see the module docstring). Pure: the
    savings of the elision steps are computed, not applied; `summary` is a prediction, which
    `compact_history` checks again with the meter after the elisions."""
    messages = history.messages
    used = meter.used()
    budget = meter.budget
    limit = SUMMARISE_AT * budget
    earlier = _stub_candidates(messages, 0, TURN_ELIDE_THRESHOLD) if new_turn else []
    expected = used - estimate_tokens(_savings(messages, earlier))
    keep = KEEP_TOOL_RESULTS
    old: list[int] = []
    if expected >= ELIDE_AT * budget:
        done = set(earlier)
        after_turns = expected
        # Keep the newest 6 whole; when that leaves the prompt over the budget, keep fewer if
        # that is enough. If nothing is, keep 6: the summary should see them whole.
        for fewer in range(KEEP_TOOL_RESULTS, MIN_KEEP_TOOL_RESULTS - 1, -1):
            candidates = [
                i for i in _stub_candidates(messages, fewer, ELIDE_THRESHOLD) if i not in done
            ]
            then = after_turns - estimate_tokens(_savings(messages, candidates))
            if fewer == KEEP_TOOL_RESULTS or then <= limit:
                keep, old, expected = fewer, candidates, then
            if then <= limit:
                break
    expected = max(expected, 0)
    return CompactionPlan(
        earlier_turns=bool(earlier),
        old_tool_results=bool(old),
        keep=keep,
        summary=force_summary or expected > limit,
        used=used,
        expected=expected,
        budget=budget,
    )


def apply_elisions(history: History, meter: TokenMeter, plan: CompactionPlan) -> list[Compaction]:
    """Apply the plan's elision steps (2, then 1); one record per step that changed anything."""
    records: list[Compaction] = []
    steps: list[tuple[CompactionStep, Callable[[History], Elision], bool]] = [
        ("earlier_turns", elide_before_new_turn, plan.earlier_turns),
        (
            "old_tool_results",
            lambda h: elide_old_tool_results(h, keep=plan.keep),
            plan.old_tool_results,
        ),
    ]
    for name, step, wanted in steps:
        if not wanted:
            continue
        before = meter.used()
        elision = step(history)
        if elision.messages:
            records.append(
                Compaction(
                    step=name,
                    trigger="auto",
                    tokens_before=before,
                    tokens_after=meter.used(),
                    budget=meter.budget,
                    messages=elision.messages,
                )
            )
    return records


async def compact_history(
    history: History,
    meter: TokenMeter,
    model: ModelClient,
    *,
    new_turn: bool = False,
    force_summary: bool = False,
) -> list[Compaction]:
    """The whole ladder, before a model call: `new_turn` on the first call of a turn,
    `force_summary` for `session/compact`. Returns what changed, in order.

    Errors and cancellation are those of `summarise`; elisions already applied stay applied.
    """
    plan = plan_compaction(history, meter, new_turn=new_turn, force_summary=force_summary)
    records = apply_elisions(history, meter, plan)
    if force_summary or meter.used() > SUMMARISE_AT * meter.budget:
        before = meter.used()
        summary = await summarise(
            history,
            model,
            keep_recent_tokens=keep_recent_tokens(meter.budget),
            request_budget=meter.budget,
        )
        if summary is not None:
            records.append(
                Compaction(
                    step="summary",
                    trigger="manual" if force_summary else "auto",
                    tokens_before=before,
                    tokens_after=meter.used(),
                    budget=meter.budget,
                    messages=summary.replaced,
                    kept=summary.kept,
                    summary=summary.text,
                    usage=summary.usage,
                )
            )
    for record in records:
        log.info(
            "compaction",
            step=record.step,
            trigger=record.trigger,
            tokens_before=record.tokens_before,
            tokens_after=record.tokens_after,
            budget=record.budget,
            messages=record.messages,
        )
    return records
