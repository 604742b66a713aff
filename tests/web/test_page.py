"""The browser page of `tether web`, end to end: a real `tether web` subprocess, two real
daemons, the scripted model server, Debian's chromium driven by Playwright, and a Python
client attached to the same session as a terminal would be.

At a phone's size (390x844): the two workspaces listed, a turn streamed, an edit approved
from the page while the other client sees the approval resolved with the page's name, a
running command cancelled, the server restarted on the same port while a turn runs elsewhere
and the page caught up by itself with nothing lost or doubled; no horizontal scroll and every
target at least 44 px. At a desktop's size (1280x800): the list beside the session."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.conftest import make_workspace
from tests.support import (
    DaemonProcess,
    Home,
    alive,
    attach,
    free_port,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.clients.core.rpc import Client
from tether.protocol.events import AnyEvent, ApprovalResolved, TurnCompleted
from tether.protocol.methods import SESSION_LIST, SessionEventParams
from tether.testing import ModelServer

pytestmark = pytest.mark.web

UI_TIMEOUT_MS = 30_000
expect.set_options(timeout=UI_TIMEOUT_MS)
PHONE = ViewportSize(width=390, height=844)
DESKTOP = ViewportSize(width=1280, height=800)
PRINTED = re.compile(r"tether web: (http://127\.0\.0\.1:(\d+)/\?token=\S+)")

# What the page's controls must measure at least, for a finger (WCAG 2.5.5).
TARGETS_SMALLER_THAN_44 = """
() => [...document.querySelectorAll('button, select, textarea, summary, label:has(input)')]
  .filter((el) => el.offsetParent !== null)
  .map((el) => ({ el, box: el.getBoundingClientRect() }))
  .filter(({ box }) => box.height < 44 || box.width < 44)
  .map(({ el, box }) => `${el.outerHTML.slice(0, 80)} ${box.width}x${box.height}`)
"""
# A word longer than a phone is wide: it must wrap, not push the page sideways.
LONG_WORD = "x" * 120
HORIZONTAL_OVERFLOW = (
    "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
)


class WebServer:
    """`tether web` as a subprocess of `home` on a fixed port, as people run it (the sign-in
    is kept per port); `start` again serves on the same port."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.port = free_port()
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.reader: threading.Thread | None = None

    def start(self) -> str:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "tether.clients.cli.main",
                "web",
                "--port",
                str(self.port),
            ],
            env=self.home.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            match = PRINTED.search(line)
            if match:
                self.url, self.port = match[1], int(match[2])
                break
        else:
            raise AssertionError(f"tether web printed no URL: {''.join(self.output)}")
        stdout = self.proc.stdout
        self.reader = threading.Thread(target=lambda: self.output.extend(stdout), daemon=True)
        self.reader.start()
        return self.url

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.reader is not None:
            self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class Scene:
    home: Home
    model: ModelServer
    first: DaemonProcess
    second: DaemonProcess
    web: WebServer


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("web")
    with ModelServer({"steps": [{"text": "hello"}]}) as model:
        home = Home(root / "user", model.base_url)
        first = start_daemon(home, make_workspace(root / "alpha"))
        try:
            second = start_daemon(home, make_workspace(root / "beta"))
            try:
                web = WebServer(home)
                try:
                    web.start()
                    yield Scene(home, model, first, second, web)
                finally:
                    web.stop()
            finally:
                second.stop()
        finally:
            first.stop()


def open_page(
    browser: Browser, scene: Scene, viewport: ViewportSize, init_script: str = ""
) -> tuple[Page, list[str]]:
    """A fresh browser context on the printed URL, with the two workspaces listed; the page's
    errors (a script's, or a refusal by the CSP) collected in the list returned."""
    context = browser.new_context(viewport=viewport, has_touch=viewport is PHONE)
    page = context.new_page()
    if init_script:
        page.add_init_script(init_script)
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(scene.web.url)
    try:
        expect(page.get_by_test_id("workspace")).to_have_count(2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\npage errors: {errors}\n{page.content()[:3000]}") from None
    return page, errors


def assert_fits_a_finger(page: Page) -> None:
    assert page.evaluate(HORIZONTAL_OVERFLOW) <= 0, "the page scrolls sideways"
    assert page.evaluate(TARGETS_SMALLER_THAN_44) == []


def agent_texts(page: Page) -> list[str]:
    return page.locator('[data-testid="message"][data-kind="agent"]').all_inner_texts()


def wait_for(client: Client, session_id: str, wanted: Callable[[AnyEvent], bool]) -> AnyEvent:
    """The first event of `session_id` that `client` is sent from now on that is `wanted`."""
    deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
    while True:
        method, params = client.next_notification(timeout=deadline - time.monotonic())
        if (
            method == "session/event"
            and isinstance(params, SessionEventParams)
            and params.session_id == session_id
            and wanted(params.event)
        ):
            return params.event


def test_a_session_on_a_phone(chromium: Browser, scene: Scene) -> None:
    page, errors = open_page(chromium, scene, PHONE)
    assert page.url.endswith("/"), "the token left the address bar"
    names = page.get_by_test_id("workspace-name").all_inner_texts()
    assert sorted(names) == ["alpha", "beta"]
    assert_fits_a_finger(page)

    # A new session in alpha; a turn streams, held mid-way by the model server.
    scene.model.set_script(
        {"steps": [{"text": "one two three four five six", "chunks": 6, "hold_at_chunks": [2]}]}
    )
    alpha = page.locator('[data-testid="workspace"]', has_text="alpha")
    alpha.get_by_test_id("new-session-in").click()
    page.get_by_test_id("prompt-input").fill(f"hello {LONG_WORD}")
    page.get_by_test_id("send-button").click()
    streaming = page.locator(".message.agent.streaming")
    expect(streaming).to_have_count(1)
    expect(page.get_by_test_id("cancel-button")).to_be_enabled()
    scene.model.release()
    expect(page.locator('[data-kind="agent"]').last).to_have_text("one two three four five six")
    expect(streaming).to_have_count(0)
    assert_fits_a_finger(page)
    page.get_by_test_id("back").click()
    expect(page.get_by_test_id("session-entry")).to_contain_text(LONG_WORD[:40])
    assert_fits_a_finger(page)
    page.get_by_test_id("session-entry").click()

    # The terminal's client on the same session.
    with scene.first.client("terminal") as terminal:
        (session,) = terminal.call(SESSION_LIST).sessions
        attach(terminal, session.id)

        # An edit, asked for and allowed from the page.
        page.get_by_test_id("mode-select").select_option("ask")
        scene.model.set_script(
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
                    {"text": "edited"},
                ]
            }
        )
        page.get_by_test_id("prompt-input").fill("edit it")
        page.get_by_test_id("send-button").click()
        expect(page.get_by_test_id("approval")).to_have_count(1)
        assert_fits_a_finger(page)
        page.get_by_test_id("approval-allow").click()
        resolved = wait_for(terminal, session.id, lambda e: isinstance(e, ApprovalResolved))
        assert isinstance(resolved, ApprovalResolved)
        assert (resolved.decision, resolved.by) == ("allow", "tether web")
        expect(page.get_by_test_id("approval")).to_have_count(0)
        expect(page.locator('[data-kind="agent"]').last).to_have_text("edited")
        assert "It waves." in (scene.first.workspace / "README.md").read_text()

        # A long command, cancelled from the page.
        page.get_by_test_id("mode-select").select_option("auto")
        scene.model.set_script(
            {
                "steps": [
                    {
                        "tool_calls": [
                            {
                                "name": "run_command",
                                "arguments": {"command": "sleep 60", "description": "wait"},
                            }
                        ]
                    },
                    {"text": "never"},
                ]
            }
        )
        page.get_by_test_id("prompt-input").fill("wait")
        page.get_by_test_id("send-button").click()
        tool = page.locator('[data-testid="tool-call"]').last
        expect(tool).to_have_attribute("data-status", "running")
        page.get_by_test_id("cancel-button").click()
        expect(tool).to_have_attribute("data-status", "cancelled")
        expect(page.locator(".turn").last).to_have_attribute("data-status", "cancelled")

        # The server restarts on the same port while the terminal runs a turn: the page
        # reconnects by itself and catches up, nothing lost or doubled.
        before = agent_texts(page)
        scene.web.stop()
        scene.model.set_script({"steps": [{"text": "while you were away"}]})
        turn_id = start_turn(terminal, session.id, "meanwhile")
        wait_for(
            terminal, session.id, lambda e: isinstance(e, TurnCompleted) and e.turn_id == turn_id
        )
        expect(page.get_by_test_id("connection")).to_have_text("reconnecting")
        scene.web.start()
        expect(page.locator('[data-kind="agent"]')).to_have_count(len(before) + 1)
        assert agent_texts(page) == [*before, "while you were away"]
        expect(page.locator('[data-kind="user"]', has_text="meanwhile")).to_have_count(1)
        expect(page.get_by_test_id("connection")).to_have_count(0)
        assert_fits_a_finger(page)
    page.context.close()
    assert errors == []


# A tab in the background whose notifications are recorded (headless chromium shows none).
HIDDEN_TAB_NOTIFYING = """
window.notified = [];
let permission = "default";
window.Notification = class {
  static get permission() { return permission; }
  static async requestPermission() { permission = "granted"; return permission; }
  constructor(title, options) { window.notified.push(`${title}: ${options.body}`); }
};
Object.defineProperty(Document.prototype, "hidden", { get: () => true, configurable: true });
"""


def test_the_list_beside_the_session_on_a_desktop(chromium: Browser, scene: Scene) -> None:
    page, errors = open_page(chromium, scene, DESKTOP, HIDDEN_TAB_NOTIFYING)
    expect(page.get_by_test_id("overview")).to_be_visible()
    expect(page.get_by_test_id("session")).to_be_visible()
    entries = page.get_by_test_id("session-entry")
    expect(entries).to_have_count(1)  # alpha's session (the phone's test left it)
    entries.first.click()
    expect(entries.first).to_have_attribute("aria-current", "true")
    expect(page.get_by_test_id("session-title")).not_to_have_text("No session")
    expect(page.locator('[data-kind="agent"]').first).to_be_visible()
    # The phone's edit, shown as its changed lines (the page reads no files).
    page.get_by_test_id("open-diff").click()
    dialog = page.get_by_test_id("diff-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#diff-after")).to_contain_text("It waves.")
    expect(dialog.locator("#diff-before")).to_contain_text("It greets.")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()
    assert page.evaluate(HORIZONTAL_OVERFLOW) <= 0

    # A grep hit's `path:line` shows the file around that line, as the daemon reads it.
    wide = f"WIDE = '<{'w' * 300}>'"
    (scene.first.workspace / "src" / "wide.py").write_text(f"import os\n{wide}\nprint(WIDE)\n")
    grep = {"pattern": "WIDE =", "output_mode": "content"}
    scene.model.set_script(
        {"steps": [{"tool_calls": [{"name": "grep", "arguments": grep}]}, {"text": "found"}]}
    )
    page.get_by_test_id("prompt-input").fill("where is WIDE?")
    page.get_by_test_id("send-button").click()
    expect(page.locator('[data-kind="agent"]').last).to_have_text("found")
    page.get_by_test_id("tool-call").last.locator("summary").click()
    page.get_by_test_id("location").filter(has_text="src/wide.py:2").click()
    shown = page.get_by_test_id("file-dialog")
    expect(shown).to_be_visible()
    expect(shown.get_by_test_id("file-title")).to_have_text("src/wide.py:2 (lines 1-3 of 3)")
    expect(shown.get_by_test_id("file-line")).to_have_count(3)
    expect(shown.locator('[data-current="true"]')).to_have_text(f"2{wide}")
    # On a phone the code scrolls inside its block; the page does not scroll sideways.
    page.set_viewport_size(PHONE)
    assert page.evaluate(HORIZONTAL_OVERFLOW) <= 0
    lines = shown.get_by_test_id("file-lines")
    assert lines.evaluate("(pre) => pre.scrollWidth > pre.clientWidth")
    page.set_viewport_size(DESKTOP)
    shown.get_by_role("button", name="Close").click()
    expect(shown).to_be_hidden()
    href = page.get_by_test_id("licences").get_attribute("href")
    assert href is not None
    licences = page.request.get(urljoin(page.url, href))
    assert (licences.status, licences.headers["content-type"]) == (200, "text/plain; charset=utf-8")

    # Notifications, once allowed with a click, for a turn that ends while the tab is hidden.
    page.get_by_test_id("notify-button").click()
    expect(page.get_by_test_id("notify-button")).to_be_hidden()
    scene.model.set_script({"steps": [{"text": "done", "chunks": 2, "hold_at_chunks": [1]}]})
    with scene.first.client("terminal") as terminal:
        (session,) = terminal.call(SESSION_LIST).sessions
        start_turn(terminal, session.id, "more")
        expect(entries.first).to_have_attribute("data-state", "running")
        scene.model.release()
        expect(entries.first).to_have_attribute("data-state", "idle")
    (notified,) = page.evaluate("window.notified")
    assert notified.startswith("alpha: turn ended: hello x")

    # A workspace whose daemon stopped is offered Start, which starts it as the CLI would.
    beta = page.locator('[data-testid="workspace"]', has_text="beta")
    scene.second.stop()
    expect(beta).to_have_attribute("data-running", "false")
    beta.get_by_test_id("start-workspace").click()
    try:
        expect(beta).to_have_attribute("data-running", "true")
        expect(beta.get_by_test_id("new-session-in")).to_be_visible()
    finally:
        started = scene.home.read_discovery(scene.second.workspace)
        if started is not None and started.pid != scene.second.proc.pid:
            os.kill(started.pid, signal.SIGTERM)
            wait_until(lambda: not alive(started.pid), "the started daemon stopped")
    page.context.close()
    assert errors == []
