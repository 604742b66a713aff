"""A session's context budget as the turn loop sees it: the token meter, the compaction
ladder before each model call, and the meter clients see (`context_updated`)."""

from tether.daemon.context.budget import TokenMeter, context_budget, toolset_chars
from tether.daemon.context.compact import Compaction as CompactionRecord
from tether.daemon.context.compact import (
    CompactionError,
    compact_history,
    keep_recent_tokens,
    summarise,
    summary_worthwhile,
)
from tether.daemon.context.history import History
from tether.daemon.providers.base import ModelClient, ModelError, ModelResponse, ToolSet
from tether.daemon.sessions.session import Session, new_id
from tether.protocol.events import ContextMeter, ContextUpdated
from tether.protocol.items import AnyItem, Compaction, Notice


def compaction_failed(what: str, exc: ModelError | CompactionError) -> Notice:
    """The warning that `what` could not be summarised (the call goes ahead without it)."""
    message = exc.message if isinstance(exc, ModelError) else str(exc)
    return Notice(
        id=new_id("i"),
        level="warning",
        code="compaction_failed",
        message=f"Could not summarise {what}: {message}",
    )


def compaction_item(record: CompactionRecord) -> Compaction:
    return Compaction(
        id=new_id("i"),
        step=record.step,
        trigger=record.trigger,
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        budget=record.budget,
        summary=record.summary,
        kept_messages=record.kept,
    )


class SessionContext:
    """One session's meter and compaction, handed to each of its turns.

    Summaries are written by the model the turn calls and the budget follows the user's
    settings at the turn: each turn (and each `session/compact`) sets both with `configure`
    before it runs."""

    def __init__(
        self,
        session: Session,
        history: History,
        model: ModelClient | None,
        tools: ToolSet,
        *,
        window: int,
        max_output: int,
    ) -> None:
        self.session = session
        self._model = model
        self.meter = TokenMeter(
            history.messages, budget=context_budget(window, max_output), tools=tools
        )

    def use_tools(self, tools: ToolSet) -> None:
        """Count `tools` as the schemas sent with every call from now on (the skill tool comes
        and goes with the skills)."""
        self.meter.fixed_chars = toolset_chars(tools)

    def configure(self, *, model: ModelClient, window: int, max_output: int) -> None:
        """Summarise with `model`, within the budget of a `window` and `max_output` tokens,
        from now on."""
        self._model = model
        self.meter.budget = context_budget(window, max_output)

    @property
    def model(self) -> ModelClient:
        """The model summaries are asked of (the one the session's turns call)."""
        if self._model is None:
            raise RuntimeError("SessionContext.configure was not called before compacting")
        return self._model

    def publish(self) -> None:
        reading = ContextMeter(used=self.meter.used(), budget=self.meter.budget)
        if reading != self.session.context:
            self.session.emit(ContextUpdated(context=reading))

    async def before_call(self, history: History, *, new_turn: bool) -> list[AnyItem]:
        """Never fails the turn: a summary the model could not give is a warning, and the
        call goes ahead with the history as it is."""
        try:
            records = await compact_history(history, self.meter, self.model, new_turn=new_turn)
        except (ModelError, CompactionError) as exc:
            self.publish()
            return [compaction_failed("the earlier conversation", exc)]
        self.publish()
        return [compaction_item(r) for r in records]

    def after_call(self, response: ModelResponse) -> None:
        self.meter.record(response.usage)
        self.publish()

    def can_compact(self, history: History) -> bool:
        """Whether a summary could shorten the history (see `compact.summary_worthwhile`)."""
        return summary_worthwhile(history, keep_recent_tokens(self.meter.budget))

    async def compact_now(self, history: History) -> CompactionRecord | None:
        """Summarise the older history now (`session/compact`). Only the summary step: the
        elision steps run before every model call anyway, and this way a failure changes
        nothing. Returns None when there is nothing worth summarising (no model call).

        Raises `ModelError` and `CompactionError` (`SummaryNotShorter` included) with the
        history as it was; cancelling it leaves the history as it was too."""
        before = self.meter.used()
        summary = await summarise(
            history,
            self.model,
            keep_recent_tokens=keep_recent_tokens(self.meter.budget),
            request_budget=self.meter.budget,
        )
        if summary is None:
            return None
        self.publish()
        return CompactionRecord(
            step="summary",
            trigger="manual",
            tokens_before=before,
            tokens_after=self.meter.used(),
            budget=self.meter.budget,
            messages=summary.replaced,
            kept=summary.kept,
            summary=summary.text,
            usage=summary.usage,
        )
