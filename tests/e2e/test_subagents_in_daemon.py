"""Subagents through the real daemon: a turn whose subagent ran is in the store like any
turn, so a client that attaches after a daemon restart sees the finished subagent nested
under its task call."""

from pathlib import Path

from tests.support import (
    Home,
    attach,
    collect_until_turn_end,
    create_session,
    start_daemon,
    start_turn,
)
from tether.protocol.items import AgentMessage, ToolCall
from tether.testing import ModelServer

SCRIPT = {
    "steps": [
        {
            "match": "survey:",
            "tool_calls": [
                {
                    "name": "task",
                    "arguments": {"description": "Read the readme", "prompt": "sub: README?"},
                }
            ],
        },
        {
            "match": "sub:",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}],
        },
        {"match": "sub:", "text": "It is a demo project."},
        {"match": "survey:", "text": "The project is a demo."},
    ]
}


def test_a_finished_subagent_is_shown_nested_after_a_daemon_restart(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(SCRIPT)
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        client = daemon.client()
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "survey: what is this project?")
        collect_until_turn_end(client, session_id)
        assert daemon.stop_attached(client) == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()

    again = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        client = again.client()
        result = attach(client, session_id)
        assert result.snapshot is not None
        (turn,) = result.snapshot.turns
        task = next(i for i in turn.items if isinstance(i, ToolCall) and i.tool == "task")
        assert (task.status, task.output) == ("completed", "It is a demo project.")
        assert task.subagent is not None
        assert (task.subagent.description, task.subagent.state) == ("Read the readme", "done")
        nested = [i for i in turn.items if i.parent_item_id == task.id]
        assert [type(i).__name__ for i in nested] == ["ToolCall", "AgentMessage"]
        read, report = nested
        assert isinstance(read, ToolCall)
        assert (read.tool, read.status) == ("read_file", "completed")
        assert isinstance(report, AgentMessage)
        assert report.text == "It is a demo project."
        own = [i for i in turn.items if not i.parent_item_id and isinstance(i, AgentMessage)]
        assert [m.text for m in own] == ["The project is a demo."]
        client.close()
    finally:
        again.stop()
