"""The CLI renderer and subagents: their items nest under the task call, on stderr, live, in
a region-less scrollback and from a snapshot; their text never reaches the answer on stdout."""

import io

from tether.clients.cli.render import Renderer
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ItemUpdated,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, AnyItem, Subagent, ToolCall
from tether.protocol.methods import SessionEventParams
from tether.protocol.session import SessionInfo, SessionSnapshot, TurnSnapshot

ARGS = '{"description": "Find the readme", "prompt": "look", "subagent_type": "explore"}'
TASK = ToolCall(id="task1", call_id="c1", tool="task", arguments=ARGS)
DONE_TASK = ToolCall(
    id="task1",
    call_id="c1",
    tool="task",
    arguments=ARGS,
    status="completed",
    output="the readme says hi",
    subagent=Subagent(
        description="Find the readme",
        state="done",
        model_calls=2,
        input_tokens=1200,
        output_tokens=34,
    ),
)
READ = ToolCall(
    id="r1",
    call_id="c2",
    tool="read_file",
    arguments='{"path": "README.md"}',
    parent_item_id="task1",
)
READ_DONE = ToolCall(
    id="r1",
    call_id="c2",
    tool="read_file",
    arguments='{"path": "README.md"}',
    parent_item_id="task1",
    status="completed",
    output="hi",
)
SUB_TEXT = AgentMessage(id="m1", step=2, text="The readme\nsays hi", parent_item_id="task1")
ANSWER = AgentMessage(id="m2", step=2, text="All done.")


def params(*events: AnyEvent) -> list[SessionEventParams]:
    return [
        SessionEventParams(session_id="s", epoch="e", seq=n, event=e)
        for n, e in enumerate(events, 1)
    ]


def turn_events() -> list[AnyEvent]:
    return [
        ItemStarted(turn_id="t", item=TASK),
        ItemUpdated(
            turn_id="t",
            item=ToolCall(
                id="task1",
                call_id="c1",
                tool="task",
                arguments=ARGS,
                subagent=Subagent(description="Find the readme", state="running"),
            ),
        ),
        ItemStarted(turn_id="t", item=READ),
        ItemCompleted(turn_id="t", item=READ_DONE),
        ItemStarted(turn_id="t", item=AgentMessage(id="m1", step=2, parent_item_id="task1")),
        ItemDelta(turn_id="t", item_id="m1", delta=SUB_TEXT.text),
        ItemCompleted(turn_id="t", item=SUB_TEXT),
        ItemCompleted(turn_id="t", item=DONE_TASK),
        ItemStarted(turn_id="t", item=AgentMessage(id="m2", step=2)),
        ItemDelta(turn_id="t", item_id="m2", delta=ANSWER.text),
        ItemCompleted(turn_id="t", item=ANSWER),
        TurnCompleted(turn_id="t", status="completed", ended_at=1.0),
    ]


def plain(*, region: bool = True) -> tuple[Renderer, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=False, status_live=False, color=False, region=region)
    return renderer, out, err


EXPECTED_ERR = [
    "  ⎿ [Find the readme] ✓ read_file(path='README.md')",
    "  ⎿ [Find the readme] The readme…",
    "✓ task(explore: Find the readme) 2 model calls · 1,234 tokens",
]


def test_a_subagents_lines_nest_under_its_task_and_only_the_answer_goes_to_stdout() -> None:
    for region in (True, False):
        renderer, out, err = plain(region=region)
        for event in params(*turn_events()):
            renderer.event(event)
        assert out.getvalue() == "All done.\n"
        assert err.getvalue().splitlines() == EXPECTED_ERR


def test_a_snapshot_shows_the_subagent_nested_too() -> None:
    done: list[AnyItem] = [DONE_TASK, READ_DONE, SUB_TEXT, ANSWER]  # in the order they started
    snapshot = SessionSnapshot(
        session=SessionInfo(id="s", created_at=0.0, updated_at=0.0),
        epoch="e",
        seq=9,
        turns=[TurnSnapshot(id="t", status="completed", started_at=0.0, items=done)],
    )
    renderer, out, err = plain()
    renderer.snapshot(snapshot)
    assert out.getvalue() == "All done.\n"
    # In a snapshot the task call comes first (it started first), then what nested under it.
    assert err.getvalue().splitlines() == [EXPECTED_ERR[2], *EXPECTED_ERR[:2]]


def test_the_running_subagents_calls_show_under_their_task_and_queued_says_so() -> None:
    renderer, _, _ = plain(region=False)
    queued = ToolCall(
        id="task2",
        call_id="c3",
        tool="task",
        arguments='{"description": "Second look", "prompt": "p"}',
    )
    for event in params(
        ItemStarted(turn_id="t", item=TASK),
        ItemStarted(turn_id="t", item=queued),
        ItemUpdated(
            turn_id="t",
            item=ToolCall(
                id="task2",
                call_id="c3",
                tool="task",
                arguments=queued.arguments,
                subagent=Subagent(description="Second look", state="queued"),
            ),
        ),
        ItemStarted(turn_id="t", item=READ),
    ):
        renderer.event(event)
    activity = renderer.activity(now=0.0)
    assert activity is not None
    assert "[Find the readme] read_file(path='README.md')" in activity
    assert "2 more running" in activity


def test_an_approval_a_subagent_asks_for_names_it() -> None:
    renderer, _, err = plain()
    approval = ApprovalRequest(
        id="a1",
        turn_id="t",
        item_id="e1",
        tool="edit_file",
        arguments="{}",
        kind="edit",
        reason="mode ask: edits ask first",
        path="src/app.py",
        subagent="Fix the greeting",
    )
    renderer.event(params(ApprovalRequested(approval=approval))[0])
    assert "  asked by the subagent: Fix the greeting" in err.getvalue().splitlines()


def test_on_a_terminal_the_subagents_running_calls_are_drawn_under_its_task() -> None:
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
    for event in params(*turn_events()[:3]):
        renderer.event(event)
    drawn = err.getvalue()
    assert drawn.index("task(explore: Find the readme)") < drawn.index("    ")
    assert "read_file(path='README.md')" in drawn
    for event in params(*turn_events()[3:]):
        renderer.event(event)
    assert "[Find the readme]" in err.getvalue()
    assert "The readme" not in out.getvalue()
