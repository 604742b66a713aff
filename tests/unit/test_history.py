"""The conversation rebuilt from a session's items: a summary's item splices the summary in
where it stood, so the rebuilt history is the one the model saw."""

from tether.daemon.context.history import (
    SUMMARY_CONTINUE,
    SUMMARY_FRAME,
    SUMMARY_HEADER,
    History,
    is_summary,
)
from tether.protocol.items import AgentMessage, Compaction, ToolCall, UserMessage


def conversation(history: History) -> list[tuple[str, str, str]]:
    return [(m.role, m.content, m.tool_call_id) for m in history.messages]


def summary_item(summary: str, kept: int) -> Compaction:
    return Compaction(
        id="c",
        step="summary",
        tokens_before=100,
        tokens_after=10,
        summary=summary,
        kept_messages=kept,
    )


EARLIER = [
    UserMessage(id="u1", text="read a"),
    AgentMessage(id="a1", text="reading", step=1),
    ToolCall(
        id="t1",
        call_id="c1",
        tool="read_file",
        arguments="{}",
        status="completed",
        output="A",
        step=1,
    ),
    AgentMessage(id="a2", text="a says A", step=2),
    UserMessage(id="u2", text="and b?"),
    AgentMessage(id="a3", text="b says B", step=1),
]


def test_a_summary_item_replaces_all_but_the_kept_messages() -> None:
    rebuilt = History("system")
    rebuilt.rebuild(
        [*EARLIER, summary_item("they read a and b", kept=2), UserMessage(id="u3", text="now c")]
    )

    live = History("system")
    live.rebuild(EARLIER)
    kept = live.messages[-2:]
    assert [m.content for m in kept] == ["and b?", "b says B"]
    live.replace_with_summary("they read a and b", kept=2)
    live.add_user("now c")

    assert conversation(rebuilt) == conversation(live)
    assert rebuilt.messages[0].content == "system"
    summary = rebuilt.messages[1]
    assert is_summary(summary)
    assert summary.content == f"{SUMMARY_HEADER}\n{SUMMARY_FRAME}\n\nthey read a and b"
    assert [m.content for m in rebuilt.messages[2:]] == ["and b?", "b says B", "now c"]


def test_a_summary_that_kept_nothing_says_to_continue_from_it() -> None:
    rebuilt = History("system")
    rebuilt.rebuild([*EARLIER, summary_item("all of it", kept=0)])
    assert [m.role for m in rebuilt.messages] == ["system", "user"]
    assert rebuilt.messages[1].content.endswith(f"all of it\n\n{SUMMARY_CONTINUE}")


def test_a_second_summary_replaces_the_first() -> None:
    rebuilt = History("system")
    rebuilt.rebuild(
        [
            *EARLIER,
            summary_item("first", kept=1),
            UserMessage(id="u3", text="more"),
            summary_item("second", kept=1),
        ]
    )
    assert [m.role for m in rebuilt.messages] == ["system", "user", "user"]
    assert rebuilt.messages[1].content.endswith("second")
    assert rebuilt.messages[2].content == "more"
