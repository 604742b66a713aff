"""The CLI shows every character the daemon relays: control characters, bidi controls and
invisible characters are printed as escapes, in approval prompts, tool lines, diffs and text."""

import io

import pytest

from tether.clients.cli.render import Renderer, describe_approval, describe_call, visible
from tether.protocol.events import ApprovalRequest, ApprovalRequested, ItemDelta, ItemStarted
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


def test_the_renderer_escapes_tool_lines_text_and_prompts() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=True)
    call = ToolCall(
        id="i1", call_id="c1", tool="run_command", arguments='{"command": "ls\\u001b[8m"}'
    )
    renderer.event(event(1, ItemStarted(turn_id="t1", item=call)))
    renderer.event(event(2, ItemStarted(turn_id="t1", item=AgentMessage(id="i2"))))
    renderer.event(event(3, ItemDelta(turn_id="t1", item_id="i2", delta="hi\x1b[8m\n")))
    renderer.event(event(4, ApprovalRequested(approval=approval(command="ls\x1b[8m"))))
    assert not raw_controls(out.getvalue() + err.getvalue())
    assert "→ run_command(command='ls\\x1b[8m')" in out.getvalue()
    assert "hi\\x1b[8m\n" in out.getvalue()
    assert "run_command: ls\\x1b[8m" in err.getvalue()


def test_describe_call_escapes_undecodable_arguments() -> None:
    shown = describe_call(
        ToolCall(id="i1", call_id="c1", tool="x\x1b", arguments="not json \x1b[2K")
    )
    assert shown == "x\\x1b(not json \\x1b[2K)"
