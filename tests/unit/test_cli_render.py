"""The CLI renderer and replies that are superseded by a retry: on a terminal (read back
through a small screen model) the cut text is erased, into a pipe it is never written."""

import io
import re

import pytest

from tether.clients.cli.render import Renderer, screen_rows
from tether.protocol.events import (
    AnyEvent,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, ToolCall
from tether.protocol.methods import SessionEventParams
from tether.protocol.session import SessionInfo, SessionSnapshot, TurnSnapshot

PARTIAL = ["The answer, cut ", "off before the end of ", "its second line"]
RETRIED = ["The whole answer."]


def events_for(*events: AnyEvent) -> list[SessionEventParams]:
    return [
        SessionEventParams(session_id="s", epoch="e", seq=n, event=event)
        for n, event in enumerate(events, 1)
    ]


def streamed(item_id: str, pieces: list[str], *, superseded: bool = False) -> list[AnyEvent]:
    item = AgentMessage(id=item_id, step=1)
    return [
        ItemStarted(turn_id="t", item=item),
        *(ItemDelta(turn_id="t", item_id=item_id, delta=p) for p in pieces),
        ItemCompleted(
            turn_id="t",
            item=AgentMessage(id=item_id, step=1, text="".join(pieces), superseded=superseded),
        ),
    ]


CALL = ToolCall(
    id="c", call_id="c1", tool="list_dir", arguments='{"path": "."}', status="completed"
)
BEFORE: list[AnyEvent] = [
    ItemStarted(turn_id="t", item=CALL),
    ItemCompleted(turn_id="t", item=CALL),
]
RETRY = ModelRetry(turn_id="t", attempt=1, max_attempts=3, delay_seconds=1.0, reason="broke off")
END = TurnCompleted(turn_id="t", status="completed", ended_at=1.0)


def screen(output: str, columns: int) -> list[str]:
    """What a terminal `columns` wide shows after `output`: printable text with auto-wrap,
    CR, LF, cursor up (ESC [ n A) and erase to the end of the screen (ESC [ J)."""
    rows: list[list[str]] = [[]]
    row = col = 0
    for token in re.findall(r"\x1b\[\d*[AJ]|.", output, re.S):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
        elif token.startswith("\x1b[") and token.endswith("A"):
            row = max(0, row - int(token[2:-1] or "1"))
        elif token == "\x1b[J":
            del rows[row][col:]
            del rows[row + 1 :]
        else:
            if col == columns:
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col : col + 1] = [token]
            col += 1
        while len(rows) <= row:
            rows.append([])
    return ["".join(r).rstrip() for r in rows if "".join(r).strip()]


def render(
    events: list[AnyEvent], *, live: bool, size: tuple[int, int] = (24, 10)
) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=live, terminal_size=lambda: size)
    for params in events_for(*events):
        renderer.event(params)
    return out.getvalue(), err.getvalue()


def test_on_a_terminal_the_superseded_text_is_erased_and_the_retry_replaces_it() -> None:
    events = [
        *BEFORE,
        *streamed("m1", PARTIAL, superseded=True),
        RETRY,
        *streamed("m2", RETRIED),
        END,
    ]
    out, err = render(events, live=True)
    shown = screen(out, columns=24)
    assert shown == ["→ list_dir(path='.')", "The whole answer."]
    assert "retrying in 1 s (1/3): broke off" in err
    assert "replaces it" not in err


def test_on_a_terminal_text_that_cannot_be_reached_gets_a_line_instead() -> None:
    # Something else was printed after the partial text: erasing would take it too.
    queued = InputQueued(input_id="q", text="also this", by="b")
    started, *deltas, done = streamed("m1", PARTIAL, superseded=True)
    out, err = render([started, *deltas, queued, done, *streamed("m2", RETRIED), END], live=True)
    assert "\x1b[" not in out
    assert "the retried reply replaces it" in err
    # It scrolled out of reach: a terminal of three lines cannot hold its rows.
    out, err = render([*streamed("m1", PARTIAL * 3, superseded=True), END], live=True, size=(24, 3))
    assert "\x1b[" not in out
    assert "the retried reply replaces it" in err


def test_into_a_pipe_only_the_answer_is_written() -> None:
    events = [
        *BEFORE,
        *streamed("m1", PARTIAL, superseded=True),
        RETRY,
        *streamed("m2", RETRIED),
        END,
    ]
    out, err = render(events, live=False)
    assert out == "→ list_dir(path='.')\nThe whole answer.\n"
    assert "broke off" in err


def test_into_a_pipe_a_reply_the_turn_ended_without_is_still_written() -> None:
    started, *deltas, _ = streamed("m1", ["cut ", "short"])
    out, _ = render([started, *deltas, END], live=False)
    assert out == "cut short\n"


@pytest.mark.parametrize("live", [True, False])
def test_a_transcript_leaves_superseded_replies_out(live: bool) -> None:
    turn = TurnSnapshot(
        id="t",
        status="completed",
        started_at=0.0,
        items=[
            AgentMessage(id="m1", step=1, text="cut off", superseded=True),
            AgentMessage(id="m2", step=1, text="The whole answer."),
        ],
    )
    info = SessionInfo(id="s", created_at=0.0, updated_at=0.0)
    out = io.StringIO()
    Renderer(out=out, err=io.StringIO(), live=live).snapshot(
        SessionSnapshot(session=info, epoch="e", seq=1, turns=[turn])
    )
    assert out.getvalue() == "The whole answer.\n"


def test_screen_rows_counts_wrapped_and_wide_text() -> None:
    assert screen_rows("", 10) == 1
    assert screen_rows("x" * 10, 10) == 1
    assert screen_rows("x" * 11, 10) == 2
    assert screen_rows("ab\ncd\n", 10) == 3
    assert screen_rows("漢字漢字漢字", 10) == 2  # twelve cells
    assert screen_rows("e\u0301" * 10, 10) == 1  # combining accents take no cell
