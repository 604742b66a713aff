"""A real VS Code for end-to-end tests of extensions: code-server on 127.0.0.1, its workbench
opened in Debian's chromium and driven by Playwright.

`.ci/install-vscode-e2e` installs what this needs (tests/vscode/README.md). `locate()` finds the
installation or raises `NotInstalled` saying what is missing; `open_vscode()` starts a
code-server with scratch user data and extensions folders, installs `.vsix` files into it,
opens a folder in the workbench and yields a `Workbench`, and stops everything on the way out.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Browser, FrameLocator, Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/lib/chromium/chromium")
INSTALLER = ".ci/install-vscode-e2e"

# Bounds on waits that only a broken or starved machine exceeds; they turn a hang into a
# failure that says what it was waiting for.
START_TIMEOUT = 120.0
UI_TIMEOUT_MS = 60_000
# How long the palette is given to list a command before it is opened again (run_command).
PALETTE_RETRY_MS = 2_000

# The workbench as a test wants it: no welcome page, walkthroughs, trust prompt, update or
# gallery checks, or AI panels opening over the views under test.
USER_SETTINGS: dict[str, object] = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "security.workspace.trust.enabled": False,
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "extensions.ignoreRecommendations": True,
    "update.mode": "none",
    "telemetry.telemetryLevel": "off",
    "workbench.enableExperiments": False,
    "chat.disableAIFeatures": True,
    "git.enabled": False,
}

_LISTENING = re.compile(r"HTTP server listening on (http://127\.0\.0\.1:\d+)/?")


class NotInstalled(Exception):
    """What the harness needs is not on this machine; the message says what and how to get it."""


@dataclass(frozen=True)
class Installation:
    node: Path
    code_server: Path  # code-server's entry script, run by `node`

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.code_server), *args]


def cache_dir() -> Path:
    """Where the installer put Node and code-server: $TETHER_VSCODE_E2E_DIR, or
    build/vscode-e2e in the repository."""
    configured = os.environ.get("TETHER_VSCODE_E2E_DIR")
    return Path(configured) if configured else REPO / "build" / "vscode-e2e"


def locate(root: Path | None = None) -> Installation:
    """The installation `.ci/install-vscode-e2e` made in `root` (by default `cache_dir()`), or
    NotInstalled naming what is missing."""
    root = cache_dir() if root is None else root
    wanted = {
        # Written last, so a half-done or failed install is not taken for one.
        "installer's stamp": root / "installed",
        "Node": root / "bin" / "node",
        "code-server": root / "code-server/node_modules/code-server/out/node/entry.js",
        "chromium": CHROMIUM,
    }
    missing = [f"{name} ({path})" for name, path in wanted.items() if not path.exists()]
    if missing:
        raise NotInstalled(
            f"the VS Code harness is not installed: no {', '.join(missing)}; run `bash {INSTALLER}`"
        )
    return Installation(node=wanted["Node"], code_server=wanted["code-server"])


def isolated_env(root: Path) -> dict[str, str]:
    """This process's environment with HOME and the XDG folders moved under `root`, so that
    code-server, its extension host and whatever an extension starts keep their state and
    logs there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env["HOME"] = str(root / "home")
    for name in ("CONFIG", "DATA", "STATE", "CACHE"):
        env[f"XDG_{name}_HOME"] = str(root / name.lower())
    return env


class CodeServer:
    """One code-server process with its own user data and extensions folders and config
    file under `scratch`, run in `env` (by default `isolated_env` under `scratch`/user); its
    extension host, and so the extensions' processes, inherit `env` too.

    `install_extension` before `start`; `stop` ends the server and every process it started
    (extension host, terminals, watchers), which share its process group."""

    def __init__(
        self, installation: Installation, scratch: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.installation = installation
        self.user_data = scratch / "user-data"
        self.extensions = scratch / "extensions"
        self.config = scratch / "config.yaml"
        self.env = dict(env) if env is not None else isolated_env(scratch / "user")
        self.log: list[str] = []
        self.url: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None
        (self.user_data / "User").mkdir(parents=True, exist_ok=True)
        self.extensions.mkdir(parents=True, exist_ok=True)
        (self.user_data / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS))
        # Without a config file of its own code-server reads, or writes with a password in it,
        # ~/.config/code-server/config.yaml; the flags say everything.
        self.config.write_text("")

    def _args(self, *args: str) -> list[str]:
        return self.installation.command(
            "--config",
            str(self.config),
            "--user-data-dir",
            str(self.user_data),
            "--extensions-dir",
            str(self.extensions),
            *args,
        )

    def _env(self) -> dict[str, str]:
        env = dict(self.env)
        # The extension host runs on code-server's Node, whatever `node` is on PATH.
        env["PATH"] = f"{self.installation.node.parent}{os.pathsep}{env.get('PATH', '')}"
        # No other password or port settings leak in from the caller's environment.
        for name in ("PASSWORD", "HASHED_PASSWORD", "PORT", "VSCODE_PROXY_URI"):
            env.pop(name, None)
        # A gallery without a service URL is no gallery: the workbench queries none (by
        # default it asks Open VSX for updates and recommendations).
        env["EXTENSIONS_GALLERY"] = "{}"
        return env

    def install_extension(self, vsix: Path) -> None:
        """Install the `.vsix` at `vsix`; raise RuntimeError with code-server's output if it
        refuses it."""
        done = subprocess.run(
            self._args("--install-extension", str(vsix), "--force"),
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
        output = done.stdout + done.stderr
        if done.returncode != 0 or "successfully installed" not in output.lower():
            raise RuntimeError(f"code-server did not install {vsix}:\n{output}")

    def start(self) -> str:
        """Start the server on a free port of 127.0.0.1, with no authentication; return its URL
        once it listens."""
        self._process = subprocess.Popen(
            self._args(
                "--bind-addr",
                "127.0.0.1:0",
                "--auth",
                "none",
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                "--ignore-last-opened",
            ),
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, args=(self._process,), daemon=True)
        self._reader.start()
        if not self._listening.wait(START_TIMEOUT) or self.url is None:
            self.stop()
            raise RuntimeError("code-server did not start listening:\n" + "".join(self.log))
        return self.url

    def _read(self, process: subprocess.Popen[str]) -> None:
        # Drains the pipe for the server's whole life, so it never blocks on a full one.
        assert process.stdout is not None
        for line in process.stdout:
            self.log.append(line)
            found = _LISTENING.search(line)
            if found and self.url is None:
                self.url = found.group(1)
                self._listening.set()
        self._listening.set()

    def stop(self) -> None:
        """End the server's process group: SIGTERM, then SIGKILL if it lingers."""
        process, self._process = self._process, None
        if process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader (an extension host shutting down).
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if self._reader is not None:
            # A process that left the group could hold the pipe open; its output is not needed.
            self._reader.join(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


class Workbench:
    """The VS Code workbench in a Playwright page."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def wait_ready(self) -> None:
        """Wait until the workbench has drawn itself, status bar included. Extensions may
        still be registering (see run_command)."""
        self.page.locator(".monaco-workbench").wait_for(state="visible")
        self.page.locator(".part.statusbar").wait_for(state="visible")

    def run_command(self, title: str, opens: str | None = None) -> None:
        """Run the command whose palette entry is `title` ("Category: Title"), as a person
        would: F1, type the title, pick the entry. A command that opens a quick pick of its
        own reuses the palette's widget, so it does not close: pass the quick pick's title as
        `opens` to wait for that instead.

        An installed extension's commands reach the palette only once the workbench has
        registered the extensions the server scanned, a while after it has drawn itself, and
        an open palette does not take in commands registered after it opened: so where the
        entry is not there, the palette is closed and opened again, until UI_TIMEOUT_MS."""
        palette = self.page.locator(".quick-input-widget")
        box = palette.locator("input")
        # An entry's accessible name is its label, then any description and detail after
        # ", " (a command run before is described as recently used).
        entry = palette.get_by_role("option", name=re.compile(f"^{re.escape(title)}(, |$)"))
        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        while True:
            self.page.locator(".monaco-workbench").focus()
            self.page.keyboard.press("F1")
            # The palette puts its ">" in the box once it is ready; text typed before is lost.
            expect(box).to_have_value(">", timeout=UI_TIMEOUT_MS)
            box.fill(">" + title)
            try:
                entry.wait_for(timeout=PALETTE_RETRY_MS)
                break
            except PlaywrightTimeoutError:
                if time.monotonic() > deadline:
                    raise
                self.page.keyboard.press("Escape")
                expect(palette).to_be_hidden(timeout=UI_TIMEOUT_MS)
        entry.click()
        if opens is None:
            expect(palette).to_be_hidden(timeout=UI_TIMEOUT_MS)
        else:
            # A quick pick shown before keeps its title in the hidden widget.
            title_bar = palette.locator(".quick-input-title")
            expect(title_bar).to_have_text(opens, timeout=UI_TIMEOUT_MS)
            expect(palette).to_be_visible(timeout=UI_TIMEOUT_MS)

    def webview(self, extension_id: str) -> FrameLocator:
        """The content of the webview (view or panel) of the extension `publisher.name`: VS Code
        puts each webview in an iframe whose URL names the extension, holding the extension's
        page in a second iframe, `#active-frame`. With several webviews of one extension
        open, this is the first."""
        outer = self.page.locator(f'iframe.webview[src*="extensionId={extension_id}"]').first
        return outer.content_frame.frame_locator("#active-frame")

    @staticmethod
    def click(frame: FrameLocator, testid: str) -> None:
        """Click the element of `frame` whose `data-testid` is `testid`."""
        frame.get_by_test_id(testid).click()

    @staticmethod
    def text(frame: FrameLocator, testid: str) -> str:
        """The text of the element of `frame` whose `data-testid` is `testid`."""
        return frame.get_by_test_id(testid).inner_text()

    @staticmethod
    def expect_text(frame: FrameLocator, testid: str, text: str) -> None:
        """Wait until the element of `frame` whose `data-testid` is `testid` has the text
        `text` (whitespace at the ends aside); fail, showing the text it has, if that does not
        come within UI_TIMEOUT_MS."""
        expect(frame.get_by_test_id(testid)).to_have_text(text, timeout=UI_TIMEOUT_MS)


@contextmanager
def open_vscode(
    scratch: Path,
    folder: Path,
    vsix: Sequence[Path] = (),
    installation: Installation | None = None,
    env: Mapping[str, str] | None = None,
) -> Generator[Workbench]:
    """A code-server with the extensions `vsix` installed, its workbench open on `folder` in a
    headless chromium; everything is stopped when the block ends. `scratch` is an empty
    folder for the server's user data and extensions; `env` is the environment of the server
    and all it starts (CodeServer). Where the block raises, a screenshot of
    the page is left in it as `failure.png`, and the server's output as `code-server.log`."""
    server = CodeServer(locate() if installation is None else installation, scratch, env)
    for path in vsix:
        server.install_extension(path)
    url = server.start()
    try:
        with sync_playwright() as playwright:
            browser: Browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM),
                args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(UI_TIMEOUT_MS)
                try:
                    page.goto(f"{url}/?folder={quote(str(folder))}")
                    workbench = Workbench(page)
                    workbench.wait_ready()
                    yield workbench
                except Exception:
                    page.screenshot(path=scratch / "failure.png")
                    raise
            finally:
                browser.close()
    except Exception:
        (scratch / "code-server.log").write_text("".join(server.log))
        raise
    finally:
        server.stop()
