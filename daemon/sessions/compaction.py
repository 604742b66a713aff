"""Compacting a session on request (`session/compact`): a summary of its older history, made
now, as a turn of its own so that every client sees the compaction item.

Rules:
- Refused with SESSION_BUSY while a turn runs (a running turn compacts itself when it needs to)
  and with SHUTTING_DOWN once the daemon stops taking turns.
- When a summary cannot shorten the conversation nothing changes and the result says so
  (`compacted: false` with the reason; no turn at all when that is clear before asking the
  model).
- Cancelled (`turn/cancel`), the turn ends `cancelled` and nothing changes; interrupted by a
  daemon shutdown, SHUTTING_DOWN is raised. When the caller itself is cancelled (the client
  cancelled its request, or went away) the turn ends `cancelled` too, and the cancellation
  goes on up.
- A model error raises MODEL_UNAVAILABLE, an empty or unusable summary COMPACTION_FAILED: the
  turn ends `failed`, with a notice and no compaction item. So does an invalid user config
  (MODEL_UNAVAILABLE, `data.code` = `config_invalid`).
- The summary is written by the model the session's turns call (its own choice, else the
  user's settings for the asking client, read now), within the budget those settings give.
"""

import time
from collections.abc import Mapping

import trio

from tether.daemon.config.settings import ConfigError
from tether.daemon.context.compact import CompactionError, SummaryNotShorter
from tether.daemon.providers.base import ModelError
from tether.daemon.sessions.context import compaction_item
from tether.daemon.sessions.loaded import LoadedSession
from tether.daemon.sessions.provider_choice import provider_for
from tether.daemon.sessions.sink import Sink
from tether.daemon.sessions.turns import Turns
from tether.protocol.enums import NoticeCode
from tether.protocol.error_data import ModelUnavailable
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import TurnCompleted, TurnEndStatus, TurnError
from tether.protocol.methods import SessionCompactResult


async def compact(
    turns: Turns, live: LoadedSession, client_env: Mapping[str, str] | None = None
) -> SessionCompactResult:
    """Summarise the session's older history now, as a turn (see the module rules);
    `client_env` is the asking client's provider variables."""
    turns.check_accepting()
    session = live.session
    if turns.running(session.id) is not None:
        raise RpcError(
            ErrorCode.SESSION_BUSY, "a turn is running; it compacts itself when it needs to"
        )
    before = live.context.meter.used()
    if not live.context.can_compact(live.history):
        return SessionCompactResult(
            tokens_before=before,
            tokens_after=before,
            compacted=False,
            reason="the conversation is too short for a summary to make it smaller",
        )
    running = turns.begin(session, compaction=True, client_env=client_env)
    sink = Sink(live, running.turn_id)
    status: TurnEndStatus = "failed"
    error: TurnError | None = TurnError(
        code="internal_error", message="tether failed while compacting"
    )
    failure: RpcError | None = None
    notice_code: NoticeCode = ""
    reason = ""
    try:
        with running.scope:
            config = await turns.models.settings(client_env)
            async with turns.models.lease(provider_for(session, config)) as model:
                live.context.configure(
                    model=model,
                    window=config.provider.context_window,
                    max_output=config.provider.max_output_tokens,
                )
                record = await live.context.compact_now(live.history)
            if record is None:
                reason = "there is nothing to summarise"
            else:
                item = compaction_item(record)
                sink.item_started(item)
                sink.item_completed(item)
        status, error = "completed", None
        if running.scope.cancelled_caught:
            status = running.ended_by_cancel()
            reason = "cancelled"
    except trio.Cancelled:
        status, error = "cancelled", None
        raise
    except SummaryNotShorter as exc:
        status, error, reason = "completed", None, exc.message
        sink.notice("info", "compaction_skipped", exc.message)
    except ModelError as exc:
        error = TurnError(code=exc.code, message=exc.message)
        notice_code = exc.code
        failure = RpcError(
            ErrorCode.MODEL_UNAVAILABLE, exc.message, ModelUnavailable(code=exc.code)
        )
    except ConfigError as exc:
        message = f"Your tether settings are invalid: {exc}. Fix it and compact again."
        error = TurnError(code="config_invalid", message=message)
        notice_code = "config_invalid"
        failure = RpcError(
            ErrorCode.MODEL_UNAVAILABLE, message, ModelUnavailable(code="config_invalid")
        )
    except CompactionError as exc:
        error = TurnError(code="compaction_failed", message=exc.message)
        notice_code = "compaction_failed"
        failure = RpcError(ErrorCode.COMPACTION_FAILED, exc.message)
    finally:
        if failure is not None:
            sink.notice("error", notice_code, failure.message)
        session.emit(
            TurnCompleted(turn_id=running.turn_id, status=status, ended_at=time.time(), error=error)
        )
        turns.end(session, running)
    if failure is not None:
        raise failure
    if status == "interrupted":
        raise RpcError(ErrorCode.SHUTTING_DOWN, "the daemon stopped before the summary")
    return SessionCompactResult(
        tokens_before=before,
        tokens_after=live.context.meter.used(),
        compacted=not reason,
        reason=reason,
    )
