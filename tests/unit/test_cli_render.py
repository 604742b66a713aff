"""The CLI renderer and replies that are superseded by a retry: on a terminal (read back
through a small screen model) the cut text is erased, in plain output it is never taken back
(into a pipe it is never written, streamed without colour a line says it was replaced)."""

import io
import re

import msgspec
import pytest

from tether.clients.cli.render import Renderer
from tether.protocol.events import (
    AnyEvent,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, ImageRef, ToolCall, UserMessage
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
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def screen(output: str, columns: int) -> list[str]:
    """What a terminal `columns` wide shows after `output`: printable text with auto-wrap,
    CR, LF, cursor up (ESC [ n A), erase to the end of the screen (ESC [ J) and of the line
    (ESC [ K); colours are dropped."""
    rows: list[list[str]] = [[]]
    row = col = 0
    for token in re.findall(r"\x1b\[\d*[AJK]|.", _SGR.sub("", output), re.S):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
        elif token.startswith("\x1b[") and token.endswith("A"):
            row = max(0, row - int(token[2:-1] or "1"))
        elif token == "\x1b[J":
            del rows[row][col:]
            del rows[row + 1 :]
        elif token == "\x1b[K":
            del rows[row][col:]
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
    events: list[AnyEvent], *, live: bool, color: bool = False, size: tuple[int, int] = (24, 10)
) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(
        out=out,
        err=err,
        live=live,
        status_live=live,
        color=color,
        terminal_size=lambda: size,
        clock=lambda: 0.0,
    )
    for params in events_for(*events):
        renderer.event(params)
    return out.getvalue(), err.getvalue()


def test_on_a_terminal_the_superseded_text_is_erased_and_the_retry_replaces_it() -> None:
    events = [
        *BEFORE,
        *streamed("m1", ["First paragraph.\n\n", "Second, cut ", "off.\n\nThird"], superseded=True),
        RETRY,
        *streamed("m2", RETRIED),
        END,
    ]
    out, err = render(events, live=True, color=True, size=(40, 10))
    # Both streams share one terminal: read them back in the order they were written.
    renderer_screen = screen(_interleaved(events, size=(40, 10)), columns=40)
    assert renderer_screen == ["✓ list_dir(path='.')", "The whole answer."]
    assert "First paragraph." in _SGR.sub("", out)  # it was printed, then taken back
    assert "replaces it" not in err


def _interleaved(events: list[AnyEvent], *, size: tuple[int, int]) -> str:
    """What the terminal received when `out` and `err` are the same terminal."""
    terminal = io.StringIO()
    renderer = Renderer(
        out=terminal,
        err=terminal,
        live=True,
        status_live=True,
        color=True,
        terminal_size=lambda: size,
        clock=lambda: 0.0,
    )
    for params in events_for(*events):
        renderer.event(params)
    return terminal.getvalue()


def test_on_a_terminal_text_that_cannot_be_reached_gets_a_line_instead() -> None:
    # Something else was printed after the partial text: erasing would take it too.
    queued = InputQueued(input_id="q", text="also this", by="b")
    started, *deltas, done = streamed("m1", ["Printed.\n\n", "Next\n", "open"], superseded=True)
    events = [started, *deltas, queued, done, *streamed("m2", RETRIED), END]
    shown = screen(_interleaved(events, size=(80, 10)), columns=80)
    assert "Printed." in shown
    assert "tether: (the reply above broke off; the retried reply replaces it)" in shown
    # It scrolled out of reach: a terminal of four lines cannot hold its rows.
    long = ["\n\n".join(f"Paragraph {n}." for n in range(6)) + "\n\nend"]
    events = [*streamed("m1", long, superseded=True), END]
    shown = screen(_interleaved(events, size=(80, 4)), columns=80)
    assert "tether: (the reply above broke off; the retried reply replaces it)" in shown


def test_streamed_without_colour_a_superseded_reply_gets_a_line() -> None:
    events = [*streamed("m1", PARTIAL, superseded=True), RETRY, *streamed("m2", RETRIED), END]
    out, err = render(events, live=True)
    assert out == "".join(PARTIAL) + "\nThe whole answer.\n"
    assert "the retried reply replaces it" in err
    assert "\x1b" not in out + err


def test_into_a_pipe_only_the_answer_is_written() -> None:
    events = [
        *BEFORE,
        *streamed("m1", PARTIAL, superseded=True),
        RETRY,
        *streamed("m2", RETRIED),
        END,
    ]
    out, err = render(events, live=False)
    assert out == "The whole answer.\n"
    assert err == "✓ list_dir(path='.')\ntether: retrying in 1 s (1/3): broke off\n"


def test_into_a_pipe_a_reply_the_turn_ended_without_is_still_written() -> None:
    started, *deltas, _ = streamed("m1", ["cut ", "short"])
    out, _ = render([started, *deltas, END], live=False)
    assert out == "cut short\n"


@pytest.mark.parametrize(("live", "color"), [(True, True), (True, False), (False, False)])
def test_a_transcript_leaves_superseded_replies_out(live: bool, color: bool) -> None:
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
    Renderer(out=out, err=io.StringIO(), live=live, status_live=live, color=color).snapshot(
        SessionSnapshot(session=info, epoch="e", seq=1, turns=[turn])
    )
    assert _SGR.sub("", out.getvalue()) == "The whole answer.\n"


def test_json_mode_writes_each_event_as_received() -> None:
    out = io.StringIO()
    renderer = Renderer(json_mode=True, out=out, err=io.StringIO(), live=True, color=True)
    params = events_for(*BEFORE, *streamed("m1", PARTIAL), END)
    for p in params:
        renderer.event(p)
    assert out.getvalue() == "".join(msgspec.json.encode(p).decode() + "\n" for p in params)


SHOT = ImageRef(
    name="shot.png", mime_type="image/png", size=215_040, sha256="0" * 64, width=1280, height=720
)
SHOT_LINE = "tether: [image shot.png 1280\N{MULTIPLICATION SIGN}720, 210 KB]\n"


@pytest.mark.parametrize("live", [True, False])
def test_the_images_of_a_message_are_one_line_each_live_and_in_a_transcript(live: bool) -> None:
    message = UserMessage(id="u", text="what is this?", images=[SHOT])
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=live, status_live=live, color=False)
    for params in events_for(
        ItemStarted(turn_id="t", item=message), ItemCompleted(turn_id="t", item=message)
    ):
        renderer.event(params)
    assert err.getvalue() == SHOT_LINE
    assert out.getvalue() == ""
    turn = TurnSnapshot(id="t", status="completed", started_at=0.0, items=[message])
    info = SessionInfo(id="s", created_at=0.0, updated_at=0.0)
    out, err = io.StringIO(), io.StringIO()
    Renderer(out=out, err=err, live=live, status_live=live, color=False).snapshot(
        SessionSnapshot(session=info, epoch="e", seq=1, turns=[turn])
    )
    assert out.getvalue() == "» what is this?\n"
    assert err.getvalue() == SHOT_LINE


@pytest.mark.parametrize("live", [True, False])
def test_the_images_a_tool_returned_are_a_line_each_under_its_call(live: bool) -> None:
    looked = msgspec.structs.replace(
        CALL, tool="mcp__shots__take", arguments="{}", output="[image shot.png …]", images=[SHOT]
    )
    err = io.StringIO()
    renderer = Renderer(out=io.StringIO(), err=err, live=live, status_live=live, color=False)
    for params in events_for(
        ItemStarted(turn_id="t", item=CALL), ItemCompleted(turn_id="t", item=looked)
    ):
        renderer.event(params)
    lines = err.getvalue().splitlines()
    call = next(i for i, line in enumerate(lines) if "mcp__shots__take" in line)
    assert lines[call + 1] == "  [image shot.png 1280\N{MULTIPLICATION SIGN}720, 210 KB]"
    turn = TurnSnapshot(id="t", status="completed", started_at=0.0, items=[looked])
    info = SessionInfo(id="s", created_at=0.0, updated_at=0.0)
    err = io.StringIO()
    Renderer(out=io.StringIO(), err=err, live=live, status_live=live, color=False).snapshot(
        SessionSnapshot(session=info, epoch="e", seq=1, turns=[turn])
    )
    assert (
        "  [image shot.png 1280\N{MULTIPLICATION SIGN}720, 210 KB]" in err.getvalue().splitlines()
    )


def test_a_long_denial_is_cut_between_words_with_an_ellipsis() -> None:
    from tether.clients.core.text import first_line, outcome

    why = ": " + "the staging database is shared with the other team " * 3
    denial = (
        f"The user denied this call{why}. Do not retry it; choose another way to reach the"
        " goal, or ask the user how to proceed."
    )
    call = ToolCall(
        id="c", call_id="c", tool="run_command", arguments="{}", status="failed", output=denial
    )
    said = outcome(call)
    assert said.startswith("failed: The user denied this call")
    assert said.endswith("…")
    assert said.removesuffix("…").split()[-1] in denial.split()  # a whole word
    assert len(said) <= len("failed: ") + 200
    line = first_line("word " * 40, limit=30)
    assert line == "word word word word word word…"
