"""One session, four frontends, one daemon: `tether run` starts a turn and follows it; the ACP
client (`session/load`), the Neovim plugin (`:TetherAttach`) and a notebook (`%tether attach`)
join it while it runs; Neovim answers its approval; all four end showing the same items, each
once. A `tether attach` that joined meanwhile leaves with Ctrl-C, and one run after the turn
catches up with it.

The turn pauses twice, on events only: at its approval, which only Neovim answers (the ACP
editor waits until its request is withdrawn, the CLIs answer none), and in the approved
command, which waits for a file the test creates once the notebook follows the turn.
"""

import asyncio
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.notebooknode import NotebookNode

from tests.e2e.test_acp import JSON, Editor, editor_agent, fold
from tests.e2e.test_cli_approvals import ANSWER_LINE, RunningCli
from tests.e2e.test_jupyter import KERNEL, cell_text, environment, kernel_home
from tests.e2e.test_nvim import nvim_or_skip, run_nvim
from tests.support import DaemonProcess, command_step, run_cli, wait_until
from tether.clients.cli.exit_codes import EXIT_INTERRUPTED
from tether.protocol.events import ApprovalResolved, ItemCompleted
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.methods import SessionEventParams
from tether.testing import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.shared_daemon]

PROMPT = "Wait for the gate."
FIRST, LAST = "Looking.", "Gate passed."

Shown = dict[str, list[Any]]
"""What a frontend ended up showing of the turn: its user messages, agent texts and tool calls
(command, status), each list in order."""


def shown(users: list[str], agents: list[str], tools: list[tuple[str, str]]) -> Shown:
    return {"user": users, "agent": agents, "tools": tools}


def cli_shown(lines: list[str]) -> tuple[Shown, list[SessionEventParams]]:
    """`tether run --json`'s events folded: the items it completed, each once."""
    events = [msgspec.json.decode(line, type=SessionEventParams) for line in lines]
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), "an event printed twice or out of order"
    items = [e.event.item for e in events if isinstance(e.event, ItemCompleted)]
    assert len({i.id for i in items}) == len(items), "an item completed twice"
    return shown(
        [i.text for i in items if isinstance(i, UserMessage)],
        [i.text for i in items if isinstance(i, AgentMessage) and not i.superseded],
        [(json.loads(i.arguments)["command"], i.status) for i in items if isinstance(i, ToolCall)],
    ), events


def nvim_shown(turns: list[JSON]) -> Shown:
    """The plugin's state of the session: its one turn's items."""
    (turn,) = turns
    assert turn["status"] == "completed"
    items = turn["items"]
    return shown(
        [i["text"] for i in items if i["type"] == "user_message"],
        [i["text"] for i in items if i["type"] == "agent_message" and not i.get("superseded")],
        [
            (json.loads(i["arguments"])["command"], i["status"])
            for i in items
            if i["type"] == "tool_call"
        ],
    )


def acp_shown(updates: list[JSON]) -> Shown:
    """The ACP updates folded, as an editor shows them: each message's whole text, each tool
    call with every update applied. A chunk or a tool call sent twice shows doubled."""
    assert len([u for u in updates if u["sessionUpdate"] == "tool_call"]) == len(
        {u["toolCallId"] for u in updates if u["sessionUpdate"] == "tool_call"}
    ), "a tool call announced twice"
    screen = fold(updates)
    return shown(
        [t for (kind, _), t in screen["messages"].items() if kind == "user_message_chunk"],
        [t for (kind, _), t in screen["messages"].items() if kind == "agent_message_chunk"],
        [(tool["rawInput"]["command"], tool["status"]) for tool in screen["tools"].values()],
    )


TOOL_LINE = re.compile(r"✓ run_command\(command='([^'…]*)")
"""A completed command's line in a cell: the start of the command (cut to fit the line)."""


def notebook_shown(cell: NotebookNode, command: str) -> Shown:
    """The `%tether attach` cell's one output, read back: `» ` a user message, a `TOOL_LINE`
    the command (whose shown start must be `command`'s) and `  │ ` its output's tail, the
    summary, any other line agent text."""
    assert [o.output_type for o in cell.outputs] == ["display_data"], cell.outputs
    users: list[str] = []
    agents: list[str] = []
    tools: list[tuple[str, str]] = []
    for line in cell_text(cell).splitlines():
        if line.startswith("» "):
            users.append(line.removeprefix("» "))
        elif called := TOOL_LINE.match(line):
            assert command.startswith(called.group(1)), line
            tools.append((command, "completed"))
        elif line.startswith("  │ "):
            assert tools, f"an output line before any command: {line}"
        elif line.strip() and not line.startswith("completed in "):
            agents.append(line)
    return shown(users, agents, tools)


def test_four_frontends_follow_one_turn_to_the_same_end(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    nvim_or_skip()
    home, workspace = daemon.home, daemon.workspace
    gate = tmp_path / "gate"
    gate.mkdir()
    command = f"touch {gate}/started; while [ ! -e {gate}/go ]; do sleep 0.02; done; echo through"
    model_server.set_script({"steps": [{"text": FIRST, **command_step(command)}, {"text": LAST}]})

    nb = nbformat.v4.new_notebook()
    load = nbformat.v4.new_code_cell("%load_ext tether.jupyter")
    attach = nbformat.v4.new_code_cell()  # its source names the session, once there is one
    nb.cells = [load, attach]
    env = {**home.env, **kernel_home(tmp_path / "jupyter")}
    notebook = NotebookClient(
        nb, kernel_name=KERNEL, timeout=60, resources={"metadata": {"path": str(workspace)}}
    )
    editor = Editor()

    async def withdrawn(request: JSON) -> str | None:
        await editor.withdrawn[request["id"]].wait()
        return None  # what ACP asks of an editor whose request was withdrawn

    editor.decide = withdrawn
    results: dict[str, Any] = {}

    def acp_at_the_end() -> bool:
        screen = acp_shown(editor.updates(results["session"]))
        return screen["agent"] == [FIRST, LAST] and [t[1] for t in screen["tools"]] == ["completed"]

    async def wait(condition: Callable[[], bool], what: str) -> None:
        await asyncio.to_thread(wait_until, condition, what, 30)

    async def drive(cli: RunningCli, leaving: list[RunningCli]) -> None:
        asked = await asyncio.to_thread(cli.wait_for_line, ANSWER_LINE.pattern)
        session_id = results["session"] = asked.group(1)
        async with editor_agent(home, workspace, editor) as connection:
            await connection.load_session(cwd=str(workspace), session_id=session_id)
            await editor.permission_asked.wait()

            # It says how to answer the approval from inside its follow: Ctrl-C detaches.
            leaving.append(RunningCli(home, "-w", str(workspace), session_id, command="attach"))
            await asyncio.to_thread(leaving[0].wait_for_line, "answer it with")
            leaving[0].proc.send_signal(signal.SIGINT)

            nvim = asyncio.to_thread(run_nvim, daemon, tmp_path, "approve", session=session_id)
            answered = asyncio.create_task(nvim)
            await wait((gate / "started").exists, "the approved command")
            attach.source = f"%tether attach {session_id}"
            following = asyncio.create_task(notebook.async_execute_cell(attach, 1))
            await wait(lambda: bool(attach.outputs), "the notebook to follow")
            (gate / "go").touch()

            results["cli"] = await asyncio.to_thread(cli.finish)
            results["nvim"] = await answered
            await following
            await wait(acp_at_the_end, "the ACP editor to see the end")
            results["left"] = await asyncio.to_thread(leaving[0].finish)
            results["again"] = await asyncio.to_thread(
                run_cli, home, "attach", "-w", str(workspace), session_id
            )

    async def frontends() -> None:
        async with asyncio.timeout(120), notebook.async_setup_kernel(env=env):
            await notebook.async_execute_cell(load, 0)
            cli = RunningCli(
                home, "--json", "--approval-timeout", "60", "-w", str(workspace), PROMPT
            )
            leaving: list[RunningCli] = []
            try:
                await drive(cli, leaving)
            finally:
                for process in (cli, *leaving):
                    process.close()

    with environment(env):
        asyncio.run(frontends())

    session_id = results["session"]
    expected = shown([PROMPT], [FIRST, LAST], [(command, "completed")])

    # The CLI that started the turn followed it to its end; Neovim's answer ended its wait.
    code, out, err = results["cli"]
    assert code == 0, err
    cli, events = cli_shown(out.splitlines())
    assert cli == expected
    resolved = [e.event for e in events if isinstance(e.event, ApprovalResolved)]
    assert [(r.decision, r.by) for r in resolved] == [("allow", "tether.nvim")]

    # Neovim: asked (and answered) the approval, the same items in its state and its buffer.
    seen, _ = results["nvim"]
    [picker] = seen["selects"]
    assert command in picker["prompt"]
    asking = [line for line in seen["chat_asking"] if line.startswith("- `run_command` touch ")]
    assert [line.rsplit(" — ", 1)[1] for line in asking] == ["awaiting approval"]
    assert nvim_shown(seen["turns"]) == expected
    assert (seen["stats"]["duplicates"], seen["stats"]["gaps"]) == (0, 0)
    chat = seen["chat"]
    assert sum("## You" in line for line in chat) == 1
    assert chat.count(PROMPT) == 1
    assert (chat.count(FIRST), chat.count(LAST)) == (1, 1)
    assert sum(line.startswith("- `run_command`") and "— done" in line for line in chat) == 1

    # The notebook showed the whole turn, from its first item, once.
    assert notebook_shown(attach, command) == expected
    assert "completed in" in cell_text(attach)

    # The ACP editor: the load's replay and the live updates fold to the same items; its
    # permission request was withdrawn when Neovim answered.
    assert acp_shown(editor.updates(session_id)) == expected
    (request,) = editor.permission_requests()
    assert editor.withdrawn[request["id"]].is_set()

    # The CLI that left with Ctrl-C while the approval waited left the turn running; attaching
    # again after the turn caught up with what it missed: the whole turn, once, and its code.
    code, out, err = results["left"]
    assert code == EXIT_INTERRUPTED, err
    assert "detached; the turn goes on" in err
    assert (out.count(FIRST), out.count(LAST)) == (1, 0)
    again = results["again"]
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(f"» {PROMPT}") == 1
    assert (again.stdout.count(FIRST), again.stdout.count(LAST)) == (1, 1)
    assert again.stderr.count("✓ run_command(") == 1
    assert model_server.requests[1]["messages"][-1]["content"].count("through") == 1
