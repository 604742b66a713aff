"""The CLI renderer and a tool's progress (`item_delta` with `progress`): the running call's
line says how far it has got, the latest report standing; escapes in the tool's message are
made visible; the finished call's line no longer carries it."""

import io

from tether.clients.cli.render import Renderer
from tether.protocol.events import (
    AnyEvent,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ToolProgress,
)
from tether.protocol.items import ToolCall
from tether.protocol.methods import SessionEventParams

CALL = ToolCall(id="m1", call_id="c1", tool="mcp__everything__index", arguments="{}")


def feed(renderer: Renderer, *events: AnyEvent) -> None:
    for n, event in enumerate(events, 1):
        renderer.event(SessionEventParams(session_id="s", epoch="e", seq=n, event=event))


def progress(value: float, total: float | None = None, message: str = "") -> ItemDelta:
    report = ToolProgress(progress=value, total=total, message=message)
    return ItemDelta(turn_id="t", item_id="m1", delta="", progress=report)


def test_the_running_calls_line_shows_its_latest_progress() -> None:
    renderer = Renderer(out=io.StringIO(), err=io.StringIO(), live=False, color=False)
    feed(renderer, ItemStarted(turn_id="t", item=CALL), progress(1, 10, "reading"))
    assert renderer.activity(now=0.0) is not None
    feed(renderer, progress(3, 10, "indexing \x1b[2J"))
    activity = renderer.activity(now=0.0)
    assert activity is not None
    assert activity.endswith(" · 3/10 indexing \\x1b[2J")
    feed(renderer, progress(7))
    assert (renderer.activity(now=0.0) or "").endswith(" · 7")


def test_on_a_terminal_the_progress_is_drawn_on_the_calls_line_until_it_ends() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(
        out=out,
        err=err,
        live=True,
        status_live=True,
        color=True,
        terminal_size=lambda: (100, 40),
        clock=lambda: 0.0,
    )
    feed(renderer, ItemStarted(turn_id="t", item=CALL), progress(2, 5))
    assert "mcp__everything__index" in err.getvalue()
    assert "2/5" in err.getvalue()
    done = ToolCall(
        id="m1", call_id="c1", tool=CALL.tool, arguments="{}", status="completed", output="ok"
    )
    feed(renderer, ItemCompleted(turn_id="t", item=done))
    assert "2/5" not in (renderer.activity(now=0.0) or "")
    (finished,) = [line for line in err.getvalue().split("\n") if "✓" in line]
    assert "mcp__everything__index" in finished
    assert "2/5" not in finished
