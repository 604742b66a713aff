"""tether's VS Code extension (clients/vscode) in a real VS Code: its `.vsix`, built by `npm run
package`, installed into code-server, the workbench open on a scratch workspace. The extension
starts the workspace's daemon through tether-client, with this test's Home and the scripted
model server; the CLI, run as subprocesses in the same Home, is a second client of that daemon.

One workbench serves the module's tests, in order: starting code-server and the extension host
is most of each test's cost."""

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import FrameLocator, Locator, expect

from tests.conftest import make_workspace
from tests.e2e.test_cli_approvals import ANSWER_LINE, RunningCli, tool_result
from tests.git_repo import git
from tests.support import Home, command_step, run_cli
from tests.vscode.harness import UI_TIMEOUT_MS, Installation, Workbench, open_vscode
from tests.vscode.vsix import extension_id, pack_vsix
from tether.testing import ModelServer

pytestmark = pytest.mark.vscode

EXTENSION = Path(__file__).resolve().parents[2] / "clients" / "vscode"
FIXTURE = Path(__file__).resolve().parent / "fixture-ext"
"""A minimal extension with a webview view and a button, installed beside tether's: the
harness's own check (`test_the_harness_round_trips_a_webview_button`)."""


@dataclass
class Scene:
    workbench: Workbench
    view: FrameLocator
    home: Home
    workspace: Path
    model_server: ModelServer
    scratch: Path


def build_vsix(out: Path) -> Path:
    """The extension's `.vsix`, as `npm run package` builds it (its bundles included)."""
    done = subprocess.run(
        ["npm", "run", "package", "--", "--out", str(out)],
        cwd=EXTENSION,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def scene(
    vscode_installation: Installation, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("vscode-extension")
    vsix = build_vsix(root / "tether.vsix")
    fixture = pack_vsix(FIXTURE, root / "fixture.vsix")
    workspace = make_workspace(root / "project")
    with ModelServer({"steps": [{"text": "unused"}]}) as model_server:
        # Language servers on: a code-intel tool's answer has places to click.
        home = Home(root / "user", model_server.base_url, language_servers=True)
        # The extension host runs the daemon with this Python; commands ask, edits do not.
        home.env.update(TETHER_PYTHON=sys.executable, TETHER_PERMISSION_MODE="edits")
        try:
            with open_vscode(
                root / "code-server", workspace, [vsix, fixture], vscode_installation, home.env
            ) as workbench:
                workbench.run_command("tether: New Session")
                view = workbench.webview(extension_id(EXTENSION))
                expect(view.get_by_test_id("session-state")).to_have_text(
                    "idle", timeout=UI_TIMEOUT_MS
                )
                yield Scene(workbench, view, home, workspace, model_server, root)
        finally:
            # The extension started the daemon detached from code-server; it outlives the
            # workbench unless stopped.
            run_cli(home, "daemon", "stop", "-w", str(workspace))


def agent_messages(view: FrameLocator) -> Locator:
    return view.locator('[data-testid="message"][data-kind="agent"]')


def test_a_prompt_sent_from_the_view_streams_its_answer_into_the_view(scene: Scene) -> None:
    scene.model_server.set_script(
        {"steps": [{"text": "Streamed from the scripted model.", "chunk_delay_ms": 20}]}
    )
    scene.view.get_by_test_id("prompt-input").fill("say something")
    scene.workbench.click(scene.view, "send-button")

    user = scene.view.locator('[data-testid="message"][data-kind="user"]')
    expect(user.last).to_have_text("say something", timeout=UI_TIMEOUT_MS)
    expect(agent_messages(scene.view).last).to_have_text(
        "Streamed from the scripted model.", timeout=UI_TIMEOUT_MS
    )
    expect(scene.view.get_by_test_id("session-state")).to_have_text("idle", timeout=UI_TIMEOUT_MS)


def attach_view(scene: Scene, session_id: str) -> None:
    """Attach the view to `session_id` through the session picker (tether: Attach to
    Session…), picking the entry by the id its detail shows."""
    try:
        scene.workbench.run_command("tether: Attach to Session\u2026", opens="tether sessions")
        scene.workbench.page.locator(".quick-input-widget input").fill(session_id)
    except Exception:
        # The module's workbench outlives the test, so open_vscode's failure.png would not
        # show this moment.
        scene.workbench.page.screenshot(path=scene.scratch / "attach-failure.png")
        raise
    picker = scene.workbench.page.locator(".quick-input-widget")
    entry = picker.get_by_role("option").filter(has_text=session_id)
    expect(entry).to_have_count(1, timeout=UI_TIMEOUT_MS)
    entry.click()
    expect(picker).to_be_hidden(timeout=UI_TIMEOUT_MS)


def test_allowing_in_the_view_answers_the_approval_a_cli_client_waits_on(scene: Scene) -> None:
    scene.model_server.set_script(
        {"steps": [command_step("echo allowed-in-vscode"), {"text": "Command ran."}]}
    )
    run = RunningCli(
        scene.home, "-w", str(scene.workspace), "--approval-timeout", "120", "run the command"
    )
    try:
        session_id, approval_id = run.wait_for_line(ANSWER_LINE.pattern).groups()
        attach_view(scene, session_id)
        approval = scene.view.get_by_test_id("approval")
        expect(approval).to_have_attribute("data-approval-id", approval_id, timeout=UI_TIMEOUT_MS)
        scene.workbench.click(scene.view, "approval-allow")

        code, out, err = run.finish(timeout=60)
    finally:
        run.close()
    assert code == 0, err
    assert "allowed by vscode" in err, err
    assert "allowed-in-vscode" in tool_result(scene.model_server, -1)
    assert "Command ran." in out
    expect(scene.view.get_by_test_id("approval")).to_have_count(0, timeout=UI_TIMEOUT_MS)
    tool = scene.view.get_by_test_id("tool-call").last
    expect(tool).to_have_attribute("data-status", "completed", timeout=UI_TIMEOUT_MS)
    expect(agent_messages(scene.view).last).to_have_text("Command ran.", timeout=UI_TIMEOUT_MS)
    expect(scene.view.get_by_test_id("session-state")).to_have_text("idle", timeout=UI_TIMEOUT_MS)


def test_the_view_attaches_mid_turn_to_a_session_started_in_the_terminal(scene: Scene) -> None:
    # Forty chunks, held after the fifth event until the view has attached and caught up: the
    # view sees the turn running, the chunks sent before it came, then the rest live.
    text = "".join(f"<{i:04d}>" for i in range(40))
    scene.model_server.set_script({"steps": [{"text": text, "chunks": 40, "hold_at_chunks": [5]}]})
    started = run_cli(scene.home, "run", "--detach", "-w", str(scene.workspace), "stream slowly")
    assert started.returncode == 0, started.stderr
    session_id = started.stdout.strip().split()[-1]
    assert re.fullmatch(r"s_\w+", session_id), started.stdout

    attach_view(scene, session_id)
    expect(scene.view.get_by_test_id("session-state")).to_have_text(
        "running", timeout=UI_TIMEOUT_MS
    )
    expect(agent_messages(scene.view).last).to_contain_text("<0000>", timeout=UI_TIMEOUT_MS)
    scene.model_server.release()
    expect(agent_messages(scene.view).last).to_have_text(text, timeout=UI_TIMEOUT_MS)
    expect(scene.view.get_by_test_id("session-state")).to_have_text("idle", timeout=UI_TIMEOUT_MS)


NARROWEST_SIDE_BAR_PX = 170
"""VS Code's minimum width for the side bar."""

OVERFLOWING = """body => {
    const limit = body.getBoundingClientRect().right + 0.5;
    return [...body.querySelectorAll("*")]
        .filter(el => !el.closest("pre, table, option"))
        .filter(el => el.getBoundingClientRect().right > limit)
        .map(el => `${el.tagName} ${el.className} ${el.dataset.testid ?? ""}`.trim());
}"""
"""The elements of the page that reach past its right edge (code blocks and tables scroll
within themselves and are left out)."""


def test_the_view_fits_the_narrowest_side_bar(scene: Scene) -> None:
    """With the last test's unbroken 240-character answer shown, the page laid out at the
    side bar's minimum width: nothing reaches past its edge (toolbar, header, messages,
    pickers and send row wrap or shrink)."""
    expect(agent_messages(scene.view).last).to_contain_text("<0039>", timeout=UI_TIMEOUT_MS)
    body = scene.view.locator("body")
    body.evaluate(f"body => {{ body.style.width = '{NARROWEST_SIDE_BAR_PX}px'; }}")
    try:
        overflowing = body.evaluate(OVERFLOWING)
    finally:
        body.evaluate("body => { body.style.width = ''; }")
    assert overflowing == []


def test_a_code_block_is_highlighted_and_inserted_at_the_cursor(scene: Scene) -> None:
    scene.model_server.set_script(
        {"steps": [{"text": "Here:\n\n```python\ndef inserted_here():\n    pass\n```\n"}]}
    )
    page = scene.workbench.page
    page.locator(".monaco-workbench").focus()
    page.keyboard.press("Control+P")
    quick_open = page.locator(".quick-input-widget input")
    expect(quick_open).to_be_visible(timeout=UI_TIMEOUT_MS)
    quick_open.fill("src/app.py")
    page.locator(".quick-input-widget").get_by_role("option").first.click()
    expect(page.locator(".tab.active")).to_contain_text("app.py", timeout=UI_TIMEOUT_MS)

    scene.view.get_by_test_id("prompt-input").fill("show me code")
    scene.workbench.click(scene.view, "send-button")
    block = scene.view.get_by_test_id("code-block").last
    expect(block.locator(".hljs-keyword")).to_have_text(["def", "pass"], timeout=UI_TIMEOUT_MS)
    block.get_by_test_id("insert-code").click()
    editor = page.locator(".editor-instance .view-lines").first
    expect(editor).to_contain_text("def inserted_here():", timeout=UI_TIMEOUT_MS)
    scene.workbench.run_command("File: Revert File")
    expect(editor).not_to_contain_text("inserted_here", timeout=UI_TIMEOUT_MS)
    scene.workbench.run_command("View: Close Editor")


def test_a_pending_edit_is_accepted_in_the_diff_editor(scene: Scene) -> None:
    """A new session in mode ask (the view's mode picker): the edit waits; its diff opens in
    the diff editor before it is made, and the title bar's Accept answers the approval."""
    notes = scene.workspace / "notes.txt"
    notes.write_text("one\n")
    scene.model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                {
                    "tool_calls": [
                        {
                            "name": "edit_file",
                            "arguments": {
                                "path": "notes.txt",
                                "old_string": "one",
                                "new_string": "two",
                            },
                        }
                    ]
                },
                {"text": "Edited."},
            ]
        }
    )
    scene.workbench.click(scene.view, "new-session")
    expect(scene.view.get_by_test_id("session-title")).to_have_text(
        "(untitled)", timeout=UI_TIMEOUT_MS
    )
    mode = scene.view.get_by_test_id("mode-select")
    mode.select_option("ask")
    expect(mode).to_have_value("ask", timeout=UI_TIMEOUT_MS)
    scene.view.get_by_test_id("prompt-input").fill("edit the notes")
    scene.workbench.click(scene.view, "send-button")

    approval = scene.view.get_by_test_id("approval")
    expect(approval).to_contain_text("edit_file wants to edit: notes.txt", timeout=UI_TIMEOUT_MS)
    scene.workbench.click(scene.view, "approval-diff")
    page = scene.workbench.page
    expect(page.locator(".tab.active")).to_contain_text("proposed edit", timeout=UI_TIMEOUT_MS)
    modified = page.locator(".editor .modified .view-lines:not(.line-delete)")
    expect(modified).to_contain_text("two", timeout=UI_TIMEOUT_MS)
    assert notes.read_text() == "one\n", "nothing is written before the answer"

    page.locator(".editor-actions").get_by_role(
        "button", name=re.compile("Accept Proposed Edit")
    ).click()
    expect(approval).to_have_count(0, timeout=UI_TIMEOUT_MS)
    expect(agent_messages(scene.view).last).to_have_text("Edited.", timeout=UI_TIMEOUT_MS)
    assert notes.read_text() == "two\n"
    expect(page.locator(".tab", has_text="proposed edit")).to_have_count(0, timeout=UI_TIMEOUT_MS)
    mode.select_option("edits")
    expect(mode).to_have_value("edits", timeout=UI_TIMEOUT_MS)


def listed_sessions(scene: Scene) -> list[dict[str, Any]]:
    """The workspace's sessions, as the daemon's `session/list` gives them (newest first)."""
    listed = run_cli(scene.home, "sessions", "--json", "-w", str(scene.workspace))
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def test_a_new_worktree_session_edits_its_worktree_not_the_checkout(scene: Scene) -> None:
    """The workspace made a git repository: New with the worktree box checked starts a
    session in a worktree of its own, whose branch the view shows, and whose edits land in
    the worktree under tether's data folder, the workspace's checkout untouched."""
    git(scene.workspace, "init", "--quiet", "-b", "main")
    git(scene.workspace, "add", "-A")
    git(scene.workspace, "commit", "--quiet", "-m", "first")
    scene.model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
                {
                    "tool_calls": [
                        {
                            "name": "edit_file",
                            "arguments": {
                                "path": "README.md",
                                "old_string": "It greets.",
                                "new_string": "It waves.",
                            },
                        }
                    ]
                },
                {"text": "Edited in the worktree."},
            ]
        }
    )
    box = scene.view.get_by_test_id("worktree-checkbox")
    box.check()
    scene.workbench.click(scene.view, "new-session")
    badge = scene.view.get_by_test_id("worktree-badge")
    expect(badge).to_contain_text("tether/", timeout=UI_TIMEOUT_MS)
    box.uncheck()
    scene.view.get_by_test_id("prompt-input").fill("wave in the readme")
    scene.workbench.click(scene.view, "send-button")
    expect(agent_messages(scene.view).last).to_have_text(
        "Edited in the worktree.", timeout=UI_TIMEOUT_MS
    )

    [session] = [s for s in listed_sessions(scene) if s.get("worktree")]
    worktree = session["worktree"]
    expect(badge).to_contain_text(worktree["branch"], timeout=UI_TIMEOUT_MS)
    root = Path(worktree["root"])
    assert root.resolve() != scene.workspace.resolve()
    assert str(root).startswith(str(scene.home.root / "data")), root
    assert (root / "README.md").read_text() == "# Demo project\nIt waves.\n"
    assert (scene.workspace / "README.md").read_text() == "# Demo project\nIt greets.\n"


def test_fork_shows_a_new_session_with_the_conversation(scene: Scene) -> None:
    """Fork on the shown session (the worktree session above): the view shows the fork,
    titled "… (fork)", and the daemon lists it as forked from that session."""
    before = {s["id"]: s for s in listed_sessions(scene)}
    [parent] = [s for s in before.values() if s["title"] == "wave in the readme"]
    scene.workbench.click(scene.view, "fork-button")
    expect(scene.view.get_by_test_id("session-title")).to_have_text(
        "wave in the readme (fork)", timeout=UI_TIMEOUT_MS
    )
    # The conversation came with it.
    expect(agent_messages(scene.view).last).to_have_text(
        "Edited in the worktree.", timeout=UI_TIMEOUT_MS
    )
    [fork] = [s for s in listed_sessions(scene) if s["id"] not in before]
    assert fork["title"] == "wave in the readme (fork)"
    assert fork["forkedFrom"]["sessionId"] == parent["id"]


def test_a_place_in_a_code_intel_answer_opens_at_its_line(scene: Scene) -> None:
    """find_definition's `path:line` in the tool's output, clicked in the view: the file opens
    in the editor with the cursor on that line. In a worktree session the path is the
    worktree's: the file written there is opened, though the workspace has none."""
    source = "import os\n\n\ndef target():\n    return os.sep\n\n\nprint(target())\n"
    look = {
        "name": "find_definition",
        "arguments": {"path": "src/lookup.py", "line": 8, "symbol": "target"},
    }
    scene.model_server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "src/lookup.py", "content": source},
                        }
                    ]
                },
                # A language server started by the lookup may answer that it is still
                # indexing: the lookup is asked again.
                {"tool_calls": [look]},
                {"tool_calls": [look]},
                {"tool_calls": [look]},
                {"text": "Found it."},
            ]
        }
    )
    box = scene.view.get_by_test_id("worktree-checkbox")
    box.check()
    scene.workbench.click(scene.view, "new-session")
    expect(scene.view.get_by_test_id("session-title")).to_have_text(
        "(untitled)", timeout=UI_TIMEOUT_MS
    )
    expect(scene.view.get_by_test_id("worktree-badge")).to_be_visible(timeout=UI_TIMEOUT_MS)
    box.uncheck()
    scene.view.get_by_test_id("prompt-input").fill("where is target defined")
    scene.workbench.click(scene.view, "send-button")
    expect(agent_messages(scene.view).last).to_have_text("Found it.", timeout=UI_TIMEOUT_MS)
    assert not (scene.workspace / "src" / "lookup.py").exists()

    place = scene.view.get_by_test_id("location").filter(has_text="src/lookup.py:4").last
    expect(place).to_have_attribute("data-line", "4", timeout=UI_TIMEOUT_MS)
    # A tool's output is folded once the call completes.
    place.locator("xpath=ancestor::details[1]/summary").click()
    place.click()
    page = scene.workbench.page
    expect(page.locator(".tab.active")).to_contain_text("lookup.py", timeout=UI_TIMEOUT_MS)
    cursor = page.locator("#status\\.editor\\.selection")
    expect(cursor).to_have_text(re.compile(r"^Ln 4, Col 1\b"), timeout=UI_TIMEOUT_MS)
    scene.workbench.run_command("View: Close Editor")


def test_the_daemon_log_opens_at_its_last_line(scene: Scene) -> None:
    scene.workbench.run_command("tether: Show Daemon Log")
    page = scene.workbench.page
    expect(page.locator(".tab.active")).to_contain_text(".log", timeout=UI_TIMEOUT_MS)
    # Opened at its oldest line, the cursor would stay on line 1; the daemon has logged more.
    cursor = page.locator("#status\\.editor\\.selection")
    expect(cursor).to_have_text(re.compile(r"^Ln (?!1,)\d+, Col \d+"), timeout=UI_TIMEOUT_MS)
    scene.workbench.run_command("View: Close Editor")


def test_after_reload_window_the_view_shows_its_session_again(scene: Scene) -> None:
    before = agent_messages(scene.view).last.inner_text()
    with scene.workbench.page.expect_event("load", timeout=UI_TIMEOUT_MS):
        scene.workbench.run_command("Developer: Reload Window")
    scene.workbench.wait_ready()
    view = scene.workbench.webview(extension_id(EXTENSION))
    expect(agent_messages(view).last).to_have_text(before, timeout=UI_TIMEOUT_MS)
    expect(view.get_by_test_id("session-state")).to_have_text("idle", timeout=UI_TIMEOUT_MS)
    scene.view = view


def test_the_harness_round_trips_a_webview_button(scene: Scene) -> None:
    """The harness on the fixture extension: a command opens its webview view, a click goes to
    the extension host and its answer comes back into the page — twice, so "pressed 2" has
    seen two round trips. Last in the module: the fixture's view takes the side bar."""
    scene.workbench.run_command("Harness Fixture: Open View")
    view = scene.workbench.webview(extension_id(FIXTURE))
    scene.workbench.expect_text(view, "status", "not pressed")
    scene.workbench.click(view, "press")
    scene.workbench.expect_text(view, "status", "pressed 1")
    scene.workbench.click(view, "press")
    scene.workbench.expect_text(view, "status", "pressed 2")
    assert scene.workbench.text(view, "status") == "pressed 2"
