"""The Markdown transcript of `tether export`: what a reader sees of each kind of item."""

from tether.clients.cli.transcript import OUTPUT_CHARS, transcript
from tether.protocol.events import TurnError
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Compaction,
    ImageRef,
    Notice,
    Subagent,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.session import ForkOrigin, SessionInfo, SessionSnapshot, TurnSnapshot


def snapshot(*items: AnyItem, title: str = "Fix <b>it</b>") -> SessionSnapshot:
    info = SessionInfo(
        id="s_1",
        title=title,
        created_at=0.0,
        updated_at=60.0,
        turn_count=1,
        model="m1",
        forked_from=ForkOrigin(session_id="s_0", turn_id="t_0"),
    )
    turn = TurnSnapshot(
        id="t_1",
        status="failed",
        started_at=0.0,
        items=list(items),
        error=TurnError(code="model_error", message="it broke"),
    )
    return SessionSnapshot(session=info, epoch="e", seq=1, turns=[turn])


def test_the_head_names_the_session_and_where_it_was_forked_from() -> None:
    md = transcript(snapshot(title=""))
    assert md.startswith("# Untitled session\n\n- Session: `s_1`\n- Created: 1970-01-01 00:00:00")
    assert "- Model: m1\n" in md
    assert "- Forked from: `s_0` after turn `t_0`\n" in md
    assert "## Turn 1\n" in md
    assert "> **model_error:** it broke" in md


def test_a_subagent_s_items_are_nested_in_its_task_call() -> None:
    task = ToolCall(
        id="c1",
        call_id="c1",
        tool="task",
        arguments='{"description": "look around", "prompt": "p"}',
        status="completed",
        output="the report",
        subagent=Subagent(description="look around", state="done", model_calls=2),
    )
    inner = ToolCall(
        id="c2",
        call_id="c2",
        tool="read_file",
        arguments='{"path": "a.py"}',
        status="completed",
        output="1\tprint()",
        parent_item_id="c1",
    )
    md = transcript(
        snapshot(
            UserMessage(id="u", text="go\n\nsecond paragraph"),
            task,
            AgentMessage(id="s", text="inner words", parent_item_id="c1"),
            inner,
            AgentMessage(id="r", text="retried", superseded=True),
            AgentMessage(id="a", text="All **done**. </details><details open>"),
        )
    )
    assert "**Prompt**\n\n> go\n>\n> second paragraph\n" in md
    outer = md.index("<summary>✓ task(explore: look around)")
    nested_call = md.index("<summary>✓ read_file(path=&#x27;a.py&#x27;)")
    nested_answer = md.index("inner words")
    closes = [i for i in range(len(md)) if md.startswith("</details>", i)]
    assert outer < nested_answer < nested_call < closes[-1]
    assert "Subagent (2 items):" in md
    assert md.index("the report") > nested_call  # the report after the subagent's items
    assert "retried" not in md
    assert md.rstrip().endswith("> **model_error:** it broke")
    assert "**Answer**\n\nAll **done**. &lt;/details>&lt;details open>" in md


def test_long_output_is_cut_and_fences_and_html_cannot_break_out() -> None:
    output = "```\n" + "x" * 5000 + "\nEND"
    call = ToolCall(
        id="c",
        call_id="c",
        tool="run_command",
        arguments="not json {",
        status="completed",
        exit_code=1,
        output=output,
        diff="--- a/x\n+++ b/x\n",
    )
    md = transcript(
        snapshot(
            call,
            Notice(id="n", level="warning", message="careful\x1b[2J"),
            Compaction(
                id="k", step="summary", tokens_before=900, tokens_after=100, summary="## Kept"
            ),
            TurnSummary(id="z", stop_reason="failed", duration_seconds=1.5, model_calls=1),
        )
    )
    assert "# Fix &lt;b&gt;it&lt;/b&gt;" not in md  # the title is Markdown, as typed
    assert "<summary>✗ run_command(not json {) — exit 1</summary>" in md
    assert "````text\n```\n" in md  # a fence longer than the output's own
    assert "characters cut …]\n" in md
    assert md.count("x") < OUTPUT_CHARS + 100
    assert "\nEND\n````" in md
    assert "```diff\n--- a/x\n+++ b/x\n```" in md
    assert "> **warning:** careful\\x1b[2J" in md  # escaped, not sent to a terminal
    assert "<summary>Compacted (summary, auto): 900 → 100 tokens</summary>" in md
    assert "failed in 1.5 s · 1 model call" in md


def test_the_images_of_a_prompt_are_listed_under_it() -> None:
    shot = ImageRef(
        name="shot.png",
        mime_type="image/png",
        size=215_040,
        sha256="0" * 64,
        width=1280,
        height=720,
    )
    md = transcript(snapshot(UserMessage(id="u", text="what is in this?", images=[shot])))
    assert "> what is in this?\n\n- [image shot.png 1280\N{MULTIPLICATION SIGN}720, 210 KB]\n" in md
