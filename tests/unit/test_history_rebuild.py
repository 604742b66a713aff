"""`History.rebuild`: the messages rebuilt from a session's items are the ones the live history
grew to step by step. Real turns over the scripted model server (tool calls with their results,
a compaction spliced in) and a hand-written retry whose partial reply was superseded."""

from pathlib import Path

import trio

from tests.inprocess import running_sessions
from tether.daemon.context.history import History
from tether.daemon.providers.base import Message, ToolCallRequest
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.store import Store
from tether.protocol.items import AgentMessage, AnyItem, ToolCall, UserMessage
from tether.testing import ModelServer

Shape = tuple[str, str, list[tuple[str, str, str]], str, str]


def shape(messages: list[Message]) -> list[Shape]:
    return [
        (
            m.role,
            m.content,
            [(c.id, c.name, c.arguments) for c in m.tool_calls],
            m.tool_call_id,
            m.tool_name,
        )
        for m in messages
    ]


def rebuilt(system_prompt: str, items: list[AnyItem]) -> list[Shape]:
    history = History(system_prompt)
    history.rebuild(items)
    return shape(history.messages)


async def test_a_rebuilt_history_is_the_live_one_after_tools_and_a_compaction(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the launch code is 4242\n")
    background = "some background for the summary to replace. " * 60
    model_server.set_script(
        {
            "steps": [
                {"text": "Noted."},
                {
                    "text": "Let me look.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "notes.txt"}},
                        {"name": "list_dir", "arguments": {"path": "."}},
                    ],
                },
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.txt"}}]},
                {"text": "The code is 4242."},
                {"text": "## User requests\n- the launch code (answered)"},
                {"text": "After the summary."},
            ]
        }
    )
    with trio.fail_after(20):
        async with running_sessions(sqlite_store, workspace, model_server) as sessions:
            session = await sessions.create()
            for text in ("remember this: " + background, "what is the code?"):
                sessions.start_turn(session, TurnRequest(text=text))
                await sessions.wait_idle(session.id)
            compacted = await sessions.compact(session)
            assert compacted.compacted, compacted.reason
            sessions.start_turn(session, TurnRequest(text="and now?"))
            await sessions.wait_idle(session.id)

            live = sessions._live[session.id].history.messages  # pyright: ignore[reportPrivateUsage]
            items = session.items()
    calls = [i for i in items if isinstance(i, ToolCall)]
    assert [(c.tool, c.status, c.step) for c in calls] == [
        ("read_file", "completed", 1),
        ("list_dir", "completed", 1),
        ("read_file", "failed", 2),
    ]
    # The summary replaced the long first turn; the tool calls after it kept their results.
    assert "the launch code (answered)" in live[1].content
    assert not any(background in m.content for m in live)
    assert [m.role for m in live].count("tool") == 3
    assert rebuilt(live[0].content, items) == shape(live)


def test_a_superseded_reply_and_an_unanswered_call_rebuild_as_the_loop_left_them() -> None:
    call = ToolCall(id="c_1", call_id="k_1", tool="run_command", arguments="{}", step=2)
    items: list[AnyItem] = [
        UserMessage(id="u_1", text="go", context="ctx"),
        AgentMessage(id="m_1", step=1, text="a partial ans", superseded=True),
        AgentMessage(id="m_2", step=1, text="the answer"),
        AgentMessage(id="m_3", step=2, text="running it"),
        call,  # still running when the daemon stopped: no result was recorded
        UserMessage(id="u_2", text="continue"),
    ]
    live = History("system")
    live.add_user("go", "ctx")
    live.add_assistant("the answer", [])
    live.add_assistant(
        "running it", [ToolCallRequest(id="k_1", name="run_command", arguments="{}")]
    )
    live.add_user("continue")  # answers the open call as interrupted
    assert rebuilt("system", items) == shape(live.messages)
    assert live.messages[4].role == "tool"
