"""How tether's items and events read as ACP updates (`tether.clients.acp.updates`, `diffs`),
on real files in a temporary workspace; the ACP SDK's schema checks every update made."""

import difflib
from pathlib import Path

import pytest

from tether.clients.acp import diffs
from tether.clients.acp.updates import JSON, Translator, permission_tool_call
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TodoEntry,
    TodosUpdated,
    ToolProgress,
)
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.session import SessionInfo, SessionSnapshot, TurnSnapshot


def unified(path: str, before: str | None, after: str) -> str:
    old = [] if before is None else before.splitlines(keepends=True)
    lines = difflib.unified_diff(
        old,
        after.splitlines(keepends=True),
        fromfile="/dev/null" if before is None else f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(x if x.endswith("\n") else f"{x}\n\\ No newline at end of file\n" for x in lines)


def checked(updates: list[JSON]) -> list[JSON]:
    # Imported here: the SDK's schema costs every pytest worker a second of CPU to import,
    # and only the one that runs this module needs it.
    from acp.schema import SessionNotification

    for update in updates:
        SessionNotification.model_validate({"sessionId": "s", "update": update})
    return updates


def test_an_edit_reads_as_the_whole_file_before_and_after(tmp_path: Path) -> None:
    before = "".join(f"line {n}\n" for n in range(1, 40))
    after = before.replace("line 5\n", "five\n").replace("line 30\n", "thirty\nmore\n")
    (tmp_path / "a.txt").write_text(after)
    (change,) = diffs.changes(unified("a.txt", before, after), tmp_path)
    assert change == diffs.Change(tmp_path / "a.txt", before, after)


def test_a_file_without_a_final_newline_is_read_whole(tmp_path: Path) -> None:
    before, after = "a\nb", "a\nc"
    (tmp_path / "x").write_text(after)
    (change,) = diffs.changes(unified("x", before, after), tmp_path)
    assert (change.old_text, change.new_text) == (before, after)


def test_a_file_changed_since_shows_the_hunks_alone(tmp_path: Path) -> None:
    before = "".join(f"{n}\n" for n in range(20))
    after = before.replace("10\n", "ten\n")
    (tmp_path / "f").write_text("rewritten since\n")
    (change,) = diffs.changes(unified("f", before, after), tmp_path)
    hunk = "".join(f"{n}\n" for n in range(7, 14))
    assert (change.old_text, change.new_text) == (hunk, hunk.replace("10\n", "ten\n"))


def test_a_pending_edit_reads_as_the_file_now_and_the_diff_applied(tmp_path: Path) -> None:
    before = "".join(f"line {n}\n" for n in range(1, 40))
    after = before.replace("line 2\n", "").replace("line 39\n", "last")
    (tmp_path / "a.txt").write_text(before)
    (change,) = diffs.pending(unified("a.txt", before, after), tmp_path)
    assert change == diffs.Change(tmp_path / "a.txt", before, after)
    (tmp_path / "a.txt").write_text("changed meanwhile\n")
    (change,) = diffs.pending(unified("a.txt", before, after), tmp_path)
    assert (change.old_text or "").startswith("line 1\nline 2\n")
    assert change.new_text.startswith("line 1\nline 3\n")


def test_a_created_file_has_no_before_and_a_cut_diff_keeps_what_parses(tmp_path: Path) -> None:
    created = unified("new.py", None, "x = 1\n")
    (change,) = diffs.changes(created, tmp_path)
    assert (change.old_text, change.new_text) == (None, "x = 1\n")
    cut = unified("g", "1\n2\n3\n", "1\n4\n3\n")[:-6]
    assert diffs.parse(cut)[0].hunks == []


def tool(status: str = "running", **fields: object) -> ToolCall:
    return ToolCall(
        id="i1",
        call_id="c1",
        tool="run_command",
        arguments='{"command": "make test"}',
        status=status,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def test_a_permission_for_an_edit_carries_its_diff(tmp_path: Path) -> None:
    from acp.schema import RequestPermissionRequest

    (tmp_path / "app.py").write_text("x = 1\ny = 2\n")
    preview = unified("app.py", "x = 1\ny = 2\n", "x = 1\ny = 3\n")
    approval = ApprovalRequest(
        id="a1", turn_id="t", item_id="i1", tool="edit_file", arguments="", kind="edit",
        reason="edits ask", path="app.py", preview=preview,
    )  # fmt: skip
    call = permission_tool_call(approval, None, tmp_path)
    RequestPermissionRequest.model_validate({"sessionId": "s", "toolCall": call, "options": []})
    assert call["content"] == [
        {
            "type": "diff",
            "path": str(tmp_path / "app.py"),
            "oldText": "x = 1\ny = 2\n",
            "newText": "x = 1\ny = 3\n",
        },
        {"type": "content", "content": {"type": "text", "text": "edits ask"}},
    ]


def test_a_command_streams_and_ends_as_the_spec_says(tmp_path: Path) -> None:
    translator = Translator(tmp_path)
    approval = ApprovalRequest(
        id="a1", turn_id="t", item_id="i1", tool="run_command", arguments="", kind="command",
        reason="commands ask",
    )  # fmt: skip
    updates = checked(
        [
            *translator.event(ItemStarted(turn_id="t", item=tool())),
            *translator.event(ApprovalRequested(approval=approval)),
            *translator.event(
                ApprovalResolved(approval_id="a1", turn_id="t", decision="allow", by="x")
            ),
            *translator.event(ItemDelta(turn_id="t", item_id="i1", delta="ok\n")),
            *translator.event(
                ItemCompleted(turn_id="t", item=tool("completed", output="ok\n", exit_code=2))
            ),
        ]
    )
    assert [(u["sessionUpdate"], u.get("status")) for u in updates] == [
        ("tool_call", "pending"),
        ("tool_call_update", "in_progress"),  # allowed; its output adds no second one
        ("tool_call_update", "failed"),  # a non-zero exit
    ]
    assert updates[0]["kind"] == "execute"
    assert updates[0]["rawInput"] == {"command": "make test"}
    assert updates[-1]["content"][0]["content"]["text"] == "```\nok\n```"


def test_a_tools_progress_is_a_tool_call_update_with_the_latest_report(tmp_path: Path) -> None:
    translator = Translator(tmp_path)
    call = ToolCall(id="m1", call_id="c1", tool="mcp__everything__index", arguments="{}")

    def progress(value: float, total: float | None, message: str) -> ItemDelta:
        report = ToolProgress(progress=value, total=total, message=message)
        return ItemDelta(turn_id="t", item_id="m1", delta="", progress=report)

    done = ToolCall(
        id="m1", call_id="c1", tool=call.tool, arguments="{}", status="completed", output="ok"
    )
    updates = checked(
        [
            *translator.event(ItemStarted(turn_id="t", item=call)),
            *translator.event(progress(1, 4, "reading")),
            *translator.event(progress(2, None, "")),
            *translator.event(ItemCompleted(turn_id="t", item=done)),
            *translator.event(progress(3, 4, "too late")),  # after its end: nothing
        ]
    )
    assert [(u["sessionUpdate"], u.get("status")) for u in updates] == [
        ("tool_call", "pending"),
        ("tool_call_update", "in_progress"),
        ("tool_call_update", "in_progress"),
        ("tool_call_update", "completed"),
    ]
    texts = [u["content"][0]["content"]["text"] for u in updates[1:]]
    assert texts == ["Progress: 1 of 4 (reading)", "Progress: 2", "ok"]


@pytest.mark.parametrize("arguments", ["{not json", "[1]"])
def test_arguments_that_are_no_object_are_passed_raw(tmp_path: Path, arguments: str) -> None:
    item = ToolCall(id="i", call_id="c", tool="grep", arguments=arguments, status="failed")
    (update,) = checked(Translator(tmp_path).event(ItemStarted(turn_id="t", item=item)))
    assert update["rawInput"] == {"arguments": arguments}
    assert update["status"] == "failed"


def test_text_streamed_then_completed_longer_sends_only_the_rest(tmp_path: Path) -> None:
    translator = Translator(tmp_path)
    translator.skip_inputs.add("u1")
    updates = checked(
        [
            *translator.event(ItemStarted(turn_id="t", item=UserMessage(id="u1", text="hi"))),
            *translator.event(ItemStarted(turn_id="t", item=AgentMessage(id="m"))),
            *translator.event(ItemDelta(turn_id="t", item_id="m", delta="Hel")),
            *translator.event(ItemCompleted(turn_id="t", item=AgentMessage(id="m", text="Hello"))),
            *translator.event(TodosUpdated(todos=[TodoEntry(content="x")])),
        ]
    )
    assert [u.get("content", {}).get("text") for u in updates[:2]] == ["Hel", "lo"]
    assert updates[2] == {
        "sessionUpdate": "plan",
        "entries": [{"content": "x", "status": "pending", "priority": "medium"}],
    }


def test_a_replay_gives_each_item_as_it_stands(tmp_path: Path) -> None:
    snapshot = SessionSnapshot(
        session=SessionInfo(id="s", created_at=0, updated_at=0),
        epoch="e",
        seq=9,
        turns=[
            TurnSnapshot(
                id="t",
                status="completed",
                started_at=0,
                items=[
                    UserMessage(id="u", text="go"),
                    AgentMessage(id="m", text="cut", superseded=True),
                    AgentMessage(id="m2", text="done"),
                    tool("completed", output="fine"),
                ],
            )
        ],
    )
    updates = checked(Translator(tmp_path).snapshot(snapshot))
    assert [u["sessionUpdate"] for u in updates] == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
    ]
    assert updates[1]["content"]["text"] == "done"
    assert updates[2]["status"] == "completed"


@pytest.mark.parametrize("arguments", ["{}", "", "  "])
def test_a_call_without_arguments_has_an_empty_raw_input(tmp_path: Path, arguments: str) -> None:
    item = ToolCall(id="i", call_id="c", tool="todo_read", arguments=arguments, status="running")
    (update,) = checked(Translator(tmp_path).event(ItemStarted(turn_id="t", item=item)))
    assert update["rawInput"] == {}
