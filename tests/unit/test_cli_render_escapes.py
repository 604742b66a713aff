"""The CLI shows every character the daemon relays: control characters, bidi controls and
invisible characters are printed as escapes, in approval prompts, tool lines, diffs and text."""

import io
import re

import msgspec
import pytest

from tether.clients.cli.render import Renderer, describe_approval, describe_call, visible
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
)
from tether.protocol.items import AgentMessage, ToolCall
from tether.protocol.methods import SessionEventParams

RAW = set("\x1b\r\x07\x00\x7f\x9b\u202e\u200b\u2028")


def raw_controls(text: str) -> set[str]:
    return RAW & set(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("echo ok\x1b[2K\rrm -rf ~", "echo ok\\x1b[2K\\rrm -rf ~"),
        ("ls\x07", "ls\\x07"),
        ("a\x00b\x7fc\x9bd", "a\\x00b\\x7fc\\x9bd"),
        ("echo \u202eevil\u200b", "echo \\u202eevil\\u200b"),
        ("one\ntwo", "one\\ntwo"),
        ("tab\tand\u00a0spaces", "tab\tand\u00a0spaces"),
        ("naïve — ünïcode ✓", "naïve — ünïcode ✓"),
    ],
)
def test_visible_escapes_what_a_terminal_would_not_show(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_visible_multiline_keeps_line_breaks_only() -> None:
    assert visible("a\nb\r\nc\rd\x1b[8m", multiline=True) == "a\nb\r\nc\\rd\\x1b[8m"


def approval(**fields: str) -> ApprovalRequest:
    base: dict[str, str] = {
        "id": "a1",
        "turn_id": "t1",
        "item_id": "i1",
        "tool": "run_command",
        "arguments": "{}",
        "kind": "command",
        "reason": "mode edits: commands ask first",
    }
    base.update(fields)
    return ApprovalRequest(requested_at=0.0, **base)  # type: ignore[arg-type]


def test_the_approval_prompt_shows_a_hidden_command_whole() -> None:
    prompt = describe_approval(approval(command="echo harmless\x1b[2K\rrm -rf ~\x1b[8m"))
    assert not raw_controls(prompt)
    assert "run_command: echo harmless\\x1b[2K\\rrm -rf ~\\x1b[8m\n" in prompt


def test_the_approval_prompt_marks_a_command_s_further_lines() -> None:
    prompt = describe_approval(approval(command="true\n  why: it is safe\nrm -rf ~"))
    assert prompt.split("\n")[:4] == [
        "tether: approval needed [a1] run_command: true",
        "  │   why: it is safe",
        "  │ rm -rf ~",
        "  why: mode edits: commands ask first",
    ]


def test_the_approval_prompt_escapes_diffs_paths_and_rules() -> None:
    prompt = describe_approval(
        approval(
            tool="edit_file",
            kind="edit",
            path="src/a\x1b[2K.py",
            preview="--- a/x\n+++ b/x\n+safe\x1b[1A\x1b[2K\n+\u202eevil\r\n+crlf\r\n",
            always_rule="edit_file(src/a\x1b.py)",
        )
    )
    assert not raw_controls(prompt.replace("\r\n", "\n"))
    assert "edit_file: src/a\\x1b[2K.py" in prompt
    assert "+safe\\x1b[1A\\x1b[2K\n+\\u202eevil\r\n+crlf\n  always" in prompt
    assert "always would allow: edit_file(src/a\\x1b.py)" in prompt


def event(seq: int, ev: object) -> SessionEventParams:
    return SessionEventParams(session_id="s1", epoch="e", seq=seq, event=ev)  # type: ignore[arg-type]


OURS = re.compile(r"\x1b\[[0-9;]*m|\r\x1b\[\d+A\x1b\[J")
"""What styled output writes itself: colours, and taking the live region back."""


@pytest.mark.parametrize("color", [True, False])
def test_the_renderer_escapes_tool_lines_text_output_diffs_and_prompts(color: bool) -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=True, status_live=True, color=color)
    arguments = '{"command": "ls\\u001b[8m"}'
    call = ToolCall(id="i1", call_id="c1", tool="run_command", arguments=arguments)
    edit = ToolCall(
        id="i3",
        call_id="c3",
        tool="edit_file",
        arguments="{}",
        status="completed",
        diff="--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\x1b[2K\n+\u202eevil\x1b[31m\n",
    )
    events = [
        ItemStarted(turn_id="t1", item=call),
        ItemDelta(turn_id="t1", item_id="i1", delta="out\x1b]8;;http://x\x07put\x1b[1A\n"),
        ItemCompleted(
            turn_id="t1",
            item=msgspec.structs.replace(call, status="completed", exit_code=2, output="x"),
        ),
        ItemStarted(turn_id="t1", item=edit),
        ItemCompleted(turn_id="t1", item=edit),
        ItemStarted(turn_id="t1", item=AgentMessage(id="i2")),
        ItemDelta(turn_id="t1", item_id="i2", delta="# hi\x1b[8m\n\n`\u202ecode\x1b[2K`\n\n"),
        ItemDelta(turn_id="t1", item_id="i2", delta="[a](http://x\x1b[31m) \x07done"),
        ApprovalRequested(approval=approval(command="ls\x1b[8m", preview="+\x1b[2Kp\n")),
    ]
    for seq, ev in enumerate(events, 1):
        renderer.event(event(seq, ev))
    shown = out.getvalue() + err.getvalue()
    assert not raw_controls(OURS.sub("", shown).replace("\n", ""))
    plain = OURS.sub("", shown)
    for escaped in ("\\x1b[8m", "\\x1b]8;;http://x\\x07put\\x1b[1A", "\\u202eevil\\x1b[31m"):
        assert escaped in plain
    assert "\\u202ecode\\x1b[2K" in plain
    assert "run_command: ls\\x1b[8m" in plain
    if not color:
        assert "\x1b" not in shown


def test_describe_call_escapes_undecodable_arguments() -> None:
    shown = describe_call(
        ToolCall(id="i1", call_id="c1", tool="x\x1b", arguments="not json \x1b[2K")
    )
    assert shown == "x\\x1b(not json \\x1b[2K)"
