"""The CLI's renderer: what a person sees on stdout and stderr for a turn's events."""

import io

from tether.clients.cli.render import Renderer
from tether.protocol.events import (
    AnyEvent,
    ItemCompleted,
    TurnCompleted,
    TurnEndStatus,
    TurnError,
)
from tether.protocol.items import Notice
from tether.protocol.methods import SessionEventParams


def render(*events: AnyEvent) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err)
    for seq, event in enumerate(events, 1):
        renderer.event(SessionEventParams(session_id="s1", epoch="e1", seq=seq, event=event))
    return out.getvalue(), err.getvalue()


def ended(status: TurnEndStatus, message: str | None) -> TurnCompleted:
    error = None if message is None else TurnError(code="internal_error", message=message)
    return TurnCompleted(turn_id="t1", status=status, ended_at=0.0, error=error)


def test_a_failed_turns_reason_is_printed_to_stderr() -> None:
    out, err = render(ended("failed", "tether failed: RuntimeError('Symlink loop')"))
    assert out == ""
    assert err == "tether: error: tether failed: RuntimeError('Symlink loop')\n"


def test_a_reason_already_given_by_a_notice_is_not_repeated() -> None:
    notice = Notice(id="n1", level="error", message="Invalid API key.", code="model_http_error")
    out, err = render(ItemCompleted(turn_id="t1", item=notice), ended("failed", "Invalid API key."))
    assert err == "tether: error: Invalid API key.\n"
    assert out == ""


def test_an_interrupted_turn_says_what_to_do_and_a_completed_one_says_nothing() -> None:
    _, err = render(ended("interrupted", "The daemon stopped while this turn ran."))
    assert err == "tether: The daemon stopped while this turn ran.\n"
    assert render(ended("completed", None)) == ("", "")
