"""The notebook client in a real kernel: nbclient runs a notebook (built here with nbformat)
on a real ipykernel against the real daemon and the scripted model; and the approval buttons,
clicked in this process, against the same daemon.

One notebook holds every check, so the kernel starts twice in all (once, and once more for
the restart): the daemon started by the kernel's first magic, a turn shown in its cell, an
approval left waiting by its cell and answered by `%tether approve` in the next,
`%tether sessions`, a kernel interrupt that detaches, and a kernel restart in the middle of a
turn, which the daemon and the turn outlive, after which `%tether attach` shows that turn,
whole and once, to its end.

The turn that runs across the restart waits on a command that polls for a file the test
creates once the new kernel has attached: the model's step is then taken after the attach,
and the wait is an event, not a delay.
"""

import ast
import asyncio
import json
import os
import signal
import sys
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import nbformat
import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat.notebooknode import NotebookNode

from tests.support import (
    DaemonProcess,
    Home,
    alive,
    command_step,
    create_session,
    read_snapshot,
    wait_until,
)
from tether.clients.core.rpc import Client
from tether.clients.core.text import SPINNER
from tether.jupyter.actions import Notebook
from tether.jupyter.follow import Screen
from tether.jupyter.render import Bundle, turn_bundle
from tether.jupyter.view import TurnView
from tether.jupyter.widgets import approval_buttons
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    SESSION_LIST,
    TURN_START,
    ApprovalRespondParams,
    TurnStartParams,
)
from tether.protocol.session import SessionInfo
from tether.testing import ModelServer

pytestmark = pytest.mark.e2e

KERNEL = "tether-test"


def kernel_home(root: Path) -> dict[str, str]:
    """A kernel spec for this venv's python in `root`, and the variables that make Jupyter
    look there (and keep its runtime and config files there too)."""
    spec = root / "share" / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "tether test", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return {
        "JUPYTER_PATH": str(root / "share" / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": str(root / "ipython"),
    }


@contextmanager
def environment(env: dict[str, str]) -> Generator[None]:
    """This process's environment replaced by `env` (the kernel manager reads it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cell_text(cell: NotebookNode) -> str:
    """Everything a cell's outputs say as text: streams, and each display's text/plain."""
    parts: list[str] = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
        elif output.output_type == "error":
            parts.append("\n".join(output.traceback))
    return "".join(parts)


def _html(cell: NotebookNode) -> str:
    return "".join(o.data.get("text/html", "") for o in cell.outputs if "data" in o)


def _sessions(home: Home, workspace: Path) -> list[SessionInfo]:
    with home.activated(), Client.connect(workspace, autostart=False) as client:
        return list(client.call(SESSION_LIST).sessions)


@contextmanager
def _stopping_its_daemon(home: Home, workspace: Path) -> Generator[None]:
    """Stop the daemon a kernel started for `workspace`, once done."""
    try:
        yield
    finally:
        info = home.read_discovery(workspace)
        if info is not None and alive(info.pid):
            os.kill(info.pid, signal.SIGTERM)
            wait_until(lambda: not alive(info.pid), "the daemon to stop")


def test_a_notebook_follows_answers_and_reattaches_across_a_kernel_restart(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    (workspace / ".git").mkdir()
    notes = workspace / "notes"  # the notebook's folder: the workspace is the git root above
    notes.mkdir()
    gate = tmp_path / "gate"
    gate.mkdir()
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
                {"text": "It **greets** people. <b>raw</b>"},
                command_step("echo approved-run"),
                {"text": "The command ran."},
                command_step(
                    f"touch {gate}/started; while [ ! -e {gate}/go ]; do sleep 0.02; done;"
                    " echo through"
                ),
                {"text": "Gate passed."},
            ]
        }
    )
    sources = {
        "load": "%load_ext tether.jupyter",
        "ask": "%%tether\nWhat does this project do?",
        "asks_approval": "%%tether\nRun the greeting.",
        "approve": "%tether approve",
        "sessions": "%tether sessions",
        "slow": "%%tether --mode auto\nWait for the gate.",
        "reload": "%load_ext tether.jupyter",
        "attach": "%tether attach",
        "modules": "import sys\nprint([m for m in ('trio', 'tether.daemon') if m in sys.modules])",
    }
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources.values()]
    cells = dict(zip(sources, nb.cells, strict=True))
    cells["slow"].metadata["tags"] = ["raises-exception"]  # the interrupt ends it with an error
    index = {name: i for i, name in enumerate(sources)}
    env = {**home.env, **kernel_home(tmp_path / "jupyter")}
    client = NotebookClient(
        nb, kernel_name=KERNEL, timeout=60, resources={"metadata": {"path": str(notes)}}
    )

    async def run(name: str) -> NotebookNode:
        return await client.async_execute_cell(cells[name], index[name])

    async def wait_for(path: Path) -> None:
        await asyncio.to_thread(wait_until, path.exists, f"{path} to appear", 30)

    pids: dict[str, int] = {}

    async def drive() -> None:
        async with client.async_setup_kernel(env=env):
            for name in ("load", "ask", "asks_approval", "approve", "sessions"):
                await run(name)
            slow = asyncio.create_task(run("slow"))
            await wait_for(gate / "started")
            km = cast(AsyncKernelManager, client.km)
            started = home.read_discovery(workspace)
            assert started is not None
            pids["before the restart"] = started.pid
            await km.interrupt_kernel()
            await slow
            await km.restart_kernel()
            await cast(AsyncKernelClient, client.kc).wait_for_ready(timeout=30)
            await run("reload")
            attach = asyncio.create_task(run("attach"))
            session_id = cell_text(cells["sessions"]).split()[1]
            await asyncio.to_thread(
                wait_until,
                lambda: any(
                    s.id == session_id and s.clients > 0 for s in _sessions(home, workspace)
                ),
                "the new kernel to attach",
                30,
            )
            (gate / "go").touch()
            await attach
            await run("modules")

    with environment(env), _stopping_its_daemon(home, workspace):
        asyncio.run(drive())
        daemon = home.read_discovery(workspace)
        listed = cell_text(cells["sessions"]).splitlines()
        (marked,) = [line for line in listed if line.startswith("*")]
        (session,) = [s for s in _sessions(home, workspace) if s.id == marked.split()[1]]

    # The first magic started the daemon, which outlived the kernel it came from.
    assert daemon is not None
    assert daemon.pid == pids["before the restart"]

    # A turn shown in its cell: the question, the tool call's line, the answer.
    asked = cell_text(cells["ask"])
    assert "» What does this project do?" in asked
    assert "✓ read_file(path='README.md')" in asked
    assert "It **greets** people." in asked
    html = _html(cells["ask"])
    assert "<strong>greets</strong>" in html
    assert "&lt;b&gt;raw&lt;/b&gt;" in html
    assert "<b>raw</b>" not in html

    # The approval stops its cell, which says how to answer; the next cell answers it.
    waiting = cell_text(cells["asks_approval"])
    assert "approval needed" in waiting
    assert "echo approved-run" in waiting
    assert "%tether approve" in waiting
    approved = cell_text(cells["approve"])
    assert "allowed run_command: echo approved-run" in approved
    assert "✓ run_command(command='echo approved-run'" in approved
    assert "The command ran." in approved
    assert "approved-run" in model_server.requests[3]["messages"][-1]["content"]

    assert session.title == "What does this project do?"

    # The interrupt detached the cell, saying so in one line, and left the turn running.
    detached = cells["slow"]
    assert "detached; the turn goes on" in cell_text(detached)
    assert "Gate passed." not in cell_text(detached)
    (error,) = [o for o in detached.outputs if o.output_type == "error"]
    assert error.traceback == [
        "tether: detached; the turn goes on (%tether attach follows it again)"
    ]

    # After the restart, attach showed the whole turn, completed, in one output, once.
    attached = cells["attach"]
    assert [o.output_type for o in attached.outputs] == ["display_data"]
    shown = cell_text(attached)
    assert shown.count("» Wait for the gate.") == 1
    assert shown.count("✓ run_command(") == 1
    assert shown.count("Gate passed.") == 1
    assert "completed in" in shown
    assert session.turn_count == 3
    assert session.state == "idle"

    assert cell_text(cells["modules"]).strip() == "[]"


class _Screen:
    """Records what a turn drawn on it looked like each time."""

    def __init__(self) -> None:
        self.drawn: list[str] = []

    def show(self, view: TurnView) -> None:
        self.drawn.append(turn_bundle(view)["text/plain"])


class _Cell:
    """A cell's outputs, kept: its one-off outputs, its screen, what waited on it."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.screens: list[_Screen] = []
        self.waited: list[tuple[TurnView, Screen]] = []

    def screen(self) -> Screen:
        self.screens.append(_Screen())
        return self.screens[-1]

    def show(self, bundle: Bundle) -> None:
        self.shown.append(bundle["text/plain"])

    def waiting(self, view: TurnView, screen: Screen) -> None:
        self.waited.append((view, screen))


@pytest.mark.shared_daemon
def test_a_button_answers_the_approval_and_follows_the_turn_on_in_its_cell(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo clicked"), {"text": "Done after it."}]})
    notebook = Notebook(workspace=lambda: workspace)
    cell = _Cell()
    with home.activated():
        assert notebook.run(cell, "Run it.") == "approval"
        ((view, screen),) = cell.waited
        box = approval_buttons(notebook, view, screen)
        assert box is not None
        ((row, output),) = [child.children for child in box.children]
        label, allow, always, deny = row.children
        assert (allow.description, always.description, deny.description) == (
            "Allow",
            "Always",
            "Deny",
        )
        assert "run_command" in label.value
        allow.click()
    assert allow.disabled
    assert deny.disabled
    drawn = cell.screens[0].drawn
    assert any("the turn waits for an answer" in text for text in drawn)
    assert "✓ run_command(command='echo clicked'" in drawn[-1]
    assert "Done after it." in drawn[-1]
    assert "completed in" in drawn[-1]
    assert "clicked" in model_server.requests[1]["messages"][-1]["content"]
    assert output.outputs == ()  # nothing went wrong, so the click said nothing of its own


@pytest.mark.shared_daemon
def test_a_cell_sent_while_the_turn_runs_joins_it_and_follows_it_to_its_end(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    waits = f"touch {gate}.started; while [ ! -e {gate} ]; do sleep 0.02; done"
    model_server.set_script({"steps": [command_step(waits), {"text": "Saw both."}]})
    with daemon.client() as client:
        session_id = create_session(client)
        client.call(
            TURN_START,
            TurnStartParams(session_id=session_id, text="Wait.", permission_mode="auto"),
        )
        wait_until(Path(f"{gate}.started").exists, "the command to start")
        notebook = Notebook(session_id=session_id, workspace=lambda: workspace)
        cell = _Cell()
        with home.activated(), ThreadPoolExecutor(1) as pool:
            followed = pool.submit(notebook.run, cell, "And this.")
            wait_until(
                lambda: bool(read_snapshot(client, session_id).queued_inputs),
                "the cell's text to be queued",
            )
            gate.touch()
            assert followed.result(timeout=30) == "ended"
    (screen,) = cell.screens
    assert any("(queued, joins at the next step) And this." in text for text in screen.drawn)
    final = screen.drawn[-1]
    assert final.count("» Wait.") == 1
    assert final.count("» And this.") == 1
    assert "Saw both." in final
    assert "queued" not in final
    assert "And this." in model_server.requests[1]["messages"][-1]["content"]


@pytest.mark.shared_daemon
def test_a_button_clicked_after_another_client_answered_says_who_and_shows_the_end(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model_server.set_script({"steps": [command_step("echo late"), {"text": "Done without me."}]})
    notebook = Notebook(workspace=lambda: workspace)
    cell = _Cell()
    with home.activated():
        assert notebook.run(cell, "Run it.") == "approval"
    ((view, screen),) = cell.waited
    assert notebook.session_id is not None
    session_id = notebook.session_id
    (approval,) = view.pending.values()
    # A client names itself: a name with a terminal escape in it answers first.
    with daemon.client("the-other\x1b[2Jeditor") as other:
        other.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(session_id=session_id, approval_id=approval.id, decision="allow"),
        )
        wait_until(
            lambda: read_snapshot(other, session_id).turns[-1].status != "running",
            "the turn to end",
        )
    box = approval_buttons(notebook, view, screen)
    assert box is not None
    ((row, _output),) = [child.children for child in box.children]
    _label, allow, *_ = row.children
    capsys.readouterr()
    with home.activated():
        allow.click()
    # Without a kernel, the click's output widget prints the bundle it was given.
    said = ast.literal_eval(capsys.readouterr().out.strip())["text/plain"]
    assert said == (
        f"approval {approval.id} was already answered (allowed) by the-other\\x1b[2Jeditor"
    )
    drawn = cell.screens[0].drawn
    assert "Done without me." in drawn[-1]
    assert "completed in" in drawn[-1]
    assert SPINNER[0] not in drawn[-1]
    assert "the turn waits for an answer" not in drawn[-1]


@pytest.mark.shared_daemon
def test_a_cell_shows_a_command_s_output_tail_and_an_edit_s_diff_alone(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    name = "greeting-jupyter.txt"
    (workspace / name).write_text("line one\nhello there\n")
    edit = {"path": name, "old_string": "hello there", "new_string": "howdy there"}
    model_server.set_script(
        {
            "steps": [
                command_step("printf 'a\\nb\\nc\\nd\\ne\\nf\\ng\\n'"),
                {"tool_calls": [{"name": "read_file", "arguments": {"path": name}}]},
                {"tool_calls": [{"name": "edit_file", "arguments": edit}]},
                {"text": "Both done."},
            ]
        }
    )
    notebook = Notebook(workspace=lambda: workspace)
    cell = _Cell()
    with home.activated():
        assert notebook.run(cell, "Go.", mode="auto") == "ended"
    final = cell.screens[0].drawn[-1].splitlines()
    ran = next(i for i, line in enumerate(final) if line.startswith("✓ run_command("))
    assert final[ran + 1 : ran + 6] == ["  │ c", "  │ d", "  │ e", "  │ f", "  │ g"]
    (edited,) = [line for line in final if line.startswith("✓ edit_file(")]
    assert edited.startswith(f"✓ edit_file(path='{name}')")
    assert "old_string" not in "\n".join(final)
    assert "-hello there" in final
    assert "+howdy there" in final
