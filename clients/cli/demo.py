"""`tether demo`: the whole product, end to end, before anything is configured.

It makes a scratch project and a scratch home (so nothing of the user's config, sessions or
logs is read or written), serves the scripted model (the fake model the tests use) on a thread
of this process, starts a real daemon for the project, and runs two turns through the normal
client path, real tools on real files:

1. an edit, asked for in `ask` mode: the approval shows the diff and a second client (as from
   another terminal) answers it;
2. a turn started and left (`tether run --detach`): it runs on in the daemon with no client
   attached, and re-attaching with the last event seen catches up with what was missed;

then undoes the first turn, and stops the daemon and the model server and removes the scratch
folder. The model's part is scripted, and the demo says so.
"""

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tether.clients.cli.exit_codes import STATUS_EXIT
from tether.clients.cli.follow import Follower
from tether.clients.cli.render import Renderer
from tether.clients.core.discovery import locate, probe_workspace, wait_until_stopped
from tether.clients.core.rpc import Client
from tether.protocol.events import ApprovalRequest, ApprovalRequested, TurnStatus
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    DAEMON_SHUTDOWN,
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_UNDO,
    TURN_START,
    ApprovalRespondParams,
    SessionAttachParams,
    SessionCreateParams,
    SessionEventParams,
    SessionUndoParams,
    TurnStartParams,
)
from tether.testing import ModelServer

CORE_BEFORE = (
    "def greet(name: str) -> str:\n"
    '    """Return a friendly greeting."""\n'
    '    return f"Hello, {name}!"\n'
)
OLD_LINE = '    return f"Hello, {name}!"\n'
NEW_LINE = '    return f"Hello, {name}! Welcome to tether."\n'

DEMO_FILES = {
    "README.md": "# greeter\n\nA tiny library that greets people by name.\n",
    "greeter/__init__.py": "from greeter.core import greet\n",
    "greeter/core.py": CORE_BEFORE,
}

EDIT_PROMPT = "Make greet() welcome people to tether."
EDIT_STEPS: list[dict[str, object]] = [
    {
        "text": "Reading the function first.\n",
        "tool_calls": [{"name": "read_file", "arguments": {"path": "greeter/core.py"}}],
    },
    {
        "tool_calls": [
            {
                "name": "edit_file",
                "arguments": {
                    "path": "greeter/core.py",
                    "old_string": OLD_LINE,
                    "new_string": NEW_LINE,
                },
            }
        ]
    },
    {"text": "Done: greet() now welcomes people to tether."},
]
EXPLAIN_PROMPT = "What is this project?"
EXPLAIN_STEPS: list[dict[str, object]] = [
    {
        "tool_calls": [
            {"name": "list_dir", "arguments": {"path": "."}},
            {"name": "read_file", "arguments": {"path": "README.md"}},
        ]
    },
    {
        "text": (
            "This is `greeter`, a one-function library: `greet(name)` in greeter/core.py "
            "greets people by name, and the package re-exports it."
        ),
        "chunks": 6,
    },
]
DEMO_SCRIPT = {"steps": [*EDIT_STEPS, *EXPLAIN_STEPS]}

BANNER = (
    "tether demo: a real daemon, real tools and real files, with a SCRIPTED model standing in\n"
    "for a language model. To use a real one, see `tether run --help` and the README.\n"
)
SECOND_CLIENT = "a second terminal"
DEMO_CONFIG = "".join(
    f'[[lsp]]\nname = "{name}"\nenabled = false\n' for name in ("basedpyright", "pyright", "ruff")
)
"""The demo's own user config. A Python language server's diagnostics after the edit would
take longer than the whole demo to start, so the demo runs without them."""


class Scratch:
    """The demo's folder: the project, and the home the demo's daemon and client use."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tether-demo-")).resolve()
        self.project = self.root / "greeter"
        self.home = self.root / "home"

    def make_project(self) -> None:
        for name, text in DEMO_FILES.items():
            path = self.project / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (self.project / ".git").mkdir()  # marks the workspace root, as in a real checkout

    def environment(self, model_url: str) -> dict[str, str]:
        """The demo's environment: the user's, with every place tether keeps things moved
        into the scratch home and the model pointed at the scripted server."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        for name, sub in (
            ("XDG_RUNTIME_DIR", "run"),
            ("XDG_DATA_HOME", "data"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_STATE_HOME", "state"),
            ("XDG_CACHE_HOME", "cache"),
        ):
            folder = self.home / sub
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            env[name] = str(folder)
        (self.home / "config" / "tether").mkdir(mode=0o700)
        (self.home / "config" / "tether" / "config.toml").write_text(DEMO_CONFIG)
        env["TETHER_BASE_URL"] = model_url
        env["TETHER_MODEL"] = "scripted"
        return env

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class Background:
    """A function run on a thread, its exception re-raised by `join`."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._target = target
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="demo-second-client")

    def _run(self) -> None:
        try:
            self._target()
        except BaseException as exc:  # re-raised in the caller by join()
            self._error = exc

    def start(self) -> "Background":
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the demo's second client did not finish")
        if self._error is not None:
            raise self._error


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def approve_from_elsewhere(project: Path, session_id: str) -> None:
    """Answer the session's next approval from a client of its own, as `tether approve` in
    another terminal would."""
    with Client.connect(project, client_name=SECOND_CLIENT, autostart=False) as other:
        attached = other.call(
            SESSION_ATTACH, SessionAttachParams(session_id=session_id, role="controller")
        )
        pending: list[ApprovalRequest] = []
        if attached.snapshot is not None:
            pending = list(attached.snapshot.pending_approvals)
        while not pending:
            _, params = other.next_notification(timeout=20)
            if isinstance(params, SessionEventParams) and isinstance(
                params.event, ApprovalRequested
            ):
                pending.append(params.event.approval)
        other.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=session_id, approval_id=pending[0].id, decision="allow"
            ),
        )


def run(*, json_mode: bool = False) -> int:
    """The demo; its exit code (that of the first turn that did not complete, else 0)."""
    say(BANNER)
    scratch = Scratch()
    saved = dict(os.environ)
    server: ModelServer | None = None
    daemon_pid: int | None = None
    try:
        scratch.make_project()
        server = ModelServer(DEMO_SCRIPT).start()
        env = scratch.environment(server.base_url)
        # This process's client finds the demo's daemon where the daemon puts it.
        os.environ.clear()
        os.environ.update(env)
        daemon_pid = locate(scratch.project, idle_timeout=60, env=env).info.pid
        statuses = _session(scratch.project, Renderer(json_mode=json_mode))
    finally:
        try:
            if daemon_pid is not None:
                _stop_daemon(scratch.project, daemon_pid)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            if server is not None:
                server.stop()
            scratch.remove()
    failed: list[TurnStatus] = [status for status in statuses if status != "completed"]
    say(f"\ndemo {'finished' if not failed else f'turn {failed[0]}'}; nothing of it is left.")
    return STATUS_EXIT[failed[0]] if failed else 0


def _session(project: Path, renderer: Renderer) -> list[TurnStatus]:
    say(f"workspace: {project}\n")
    with Client.connect(project, autostart=False) as client:
        session = client.call(SESSION_CREATE, SessionCreateParams(title="demo")).session
        follower = Follower(client, session.id, renderer, answer_approvals=False)
        follower.attach()
        say(f"» {EDIT_PROMPT}   (--permission-mode ask: edits wait for a person)")
        approver = Background(lambda: approve_from_elsewhere(project, session.id)).start()
        edit = client.call(
            TURN_START,
            TurnStartParams(session_id=session.id, text=EDIT_PROMPT, permission_mode="ask"),
        ).turn_id
        statuses: list[TurnStatus] = [follower.follow(edit)]
        approver.join(timeout=20)

        say(f"\n» {EXPLAIN_PROMPT}   (--detach: the client leaves at once)")
        explain = client.call(
            TURN_START, TurnStartParams(session_id=session.id, text=EXPLAIN_PROMPT)
        ).turn_id
        cursor = follower.cursor
    say(f"detached after event {cursor.seq}; the turn runs on in the daemon, no client attached")

    with Client.connect(project, autostart=False) as client:
        follower = Follower(client, session.id, renderer, answer_approvals=False)
        attached = follower.attach(cursor)
        say(f"re-attached from event {cursor.seq}: the daemon sends the rest ({attached.mode})")
        statuses.append(follower.follow(explain))
        say(f"caught up: events {cursor.seq + 1}-{follower.cursor.seq}, each once, in order")

        say("\n» tether undo --turn <the edit>   (restores the files a turn changed)")
        undone = client.call(SESSION_UNDO, SessionUndoParams(session_id=session.id, turn_id=edit))
        for path in undone.restored:
            say(f"restored {path}")
        line = (project / "greeter" / "core.py").read_text().splitlines()[-1].strip()
        say(f"greeter/core.py reads again: {line}")
        client.call(DAEMON_SHUTDOWN)
    return statuses


def _stop_daemon(project: Path, pid: int) -> None:
    """Wait for the demo's daemon, this process's child, to exit (after a failure, SIGTERM
    it first), and reap it."""
    if probe_workspace(project) is not None and not wait_until_stopped(project, 5):
        os.kill(pid, signal.SIGTERM)
        wait_until_stopped(project)
    # It has released its lock, its last act: what is left of it is the interpreter's exit.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
