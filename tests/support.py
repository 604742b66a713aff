"""Shared test support: isolated homes, the real daemon as a subprocess, and clients.

Every daemon a test starts gets its own HOME and XDG_* folders (platformdirs follows them), so
tests never see each other's sessions, sockets or discovery files.
"""

import functools
import gc
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from contextlib import ExitStack, chdir, closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import msgspec

from tether.clients.core.rpc import CallError, Client
from tether.clients.core.websocket import ConnectionClosed, WebSocket
from tether.protocol.discovery import LOCK_NAME, DiscoveryInfo, discovery_name, workspace_key
from tether.protocol.errors import ErrorCode
from tether.protocol.events import AnyEvent, ItemCompleted, ItemDelta, TurnCompleted
from tether.protocol.items import AnyItem, ToolCall
from tether.protocol.jsonrpc import RequestId, request_frame
from tether.protocol.methods import (
    INITIALIZE,
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_LIST,
    SESSION_READ,
    TURN_CANCEL,
    TURN_START,
    InitializeParams,
    SessionAttachParams,
    SessionAttachResult,
    SessionCreateParams,
    SessionEventParams,
    SessionRef,
    TurnCancelParams,
    TurnStartParams,
)
from tether.protocol.session import Cursor, SessionSnapshot

REPO = Path(__file__).resolve().parent.parent

KILL_GRACE = 0.3
"""What `start_daemon` gives the daemon's commands between SIGTERM and SIGKILL (2 s by default):
the trees tests stop ignore SIGTERM on purpose, and each would cost the whole grace. A test may
pass its own `--kill-grace` after it."""


class Home:
    """An isolated user: HOME and XDG folders under one temporary directory. Its daemons run no
    language servers (`TETHER_LSP=off`: starting basedpyright costs more CPU than most tests)
    unless `language_servers` is set."""

    def __init__(
        self, root: Path, model_url: str | None = None, *, language_servers: bool = False
    ) -> None:
        self.root = root
        self.runtime = root / "run"
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "XDG_"))},
            "HOME": str(root / "home"),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_CACHE_HOME": str(root / "cache"),
            "TETHER_MODEL": "scripted",
            "OPENAI_API_KEY": "",
            "PYTHONUNBUFFERED": "1",
        }
        if model_url is not None:
            self.env["TETHER_BASE_URL"] = model_url
        if not language_servers:
            self.env["TETHER_LSP"] = "off"
        else:
            # A loaded machine may take longer than the default 1.5 s to check an edited file;
            # what such tests assert is the report, not how soon it comes.
            config = root / "config" / "tether" / "config.toml"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text("diagnostics_wait = 20\n")

    def discovery_path(self, workspace: Path) -> Path:
        return self.runtime / "tether" / discovery_name(str(workspace.resolve()))

    def lock_path(self, workspace: Path) -> Path:
        return self.database_path(workspace).with_name(LOCK_NAME)

    def log_path(self, workspace: Path) -> Path:
        key = workspace_key(str(workspace.resolve()))
        return self.root / "state" / "tether" / "log" / f"daemon-{key}.log"

    def stderr_path(self, workspace: Path) -> Path:
        """Where a daemon a client started writes its stderr."""
        return self.log_path(workspace).with_suffix(".stderr")

    def log_records(self, workspace: Path) -> list[dict[str, Any]]:
        """The lines of the workspace's daemon log (the current file), decoded."""
        text = self.log_path(workspace).read_text()
        return [msgspec.json.decode(line) for line in text.splitlines() if line]

    def database_path(self, workspace: Path) -> Path:
        key = workspace_key(str(workspace.resolve()))
        return self.root / "data" / "tether" / "workspaces" / key / "tether.sqlite3"

    def read_discovery(self, workspace: Path) -> DiscoveryInfo | None:
        try:
            data = self.discovery_path(workspace).read_bytes()
        except FileNotFoundError:
            return None
        return msgspec.json.decode(data, type=DiscoveryInfo)

    @contextmanager
    def activated(self) -> Generator[None]:
        """Point this process's platformdirs at this home (for in-process clients)."""
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


class DaemonProcess:
    def __init__(self, home: Home, workspace: Path, proc: "DaemonProc") -> None:
        self.home = home
        self.workspace = workspace
        self.proc = proc
        info = home.read_discovery(workspace)
        assert info is not None
        self.info = info

    @property
    def port(self) -> int:
        return self.info.port

    @property
    def token(self) -> str:
        return self.info.token

    def client(self, name: str = "test") -> Client:
        ws = WebSocket.connect(
            "127.0.0.1", self.port, headers={"Authorization": f"Bearer {self.token}"}
        )
        client = Client(ws, self.info)
        client.call(INITIALIZE, InitializeParams(client_name=name))
        return client

    def cancel_turns(self) -> None:
        """Cancel every running turn and wait until none runs: what a test that shares this
        daemon leaves behind, so no turn of its asks the model for a step the next test's
        script holds, and no approval of its is pending in the workspace."""
        with self.client("sweeper") as client:

            def running() -> list[str]:
                sessions = client.call(SESSION_LIST).sessions
                return [s.id for s in sessions if s.status == "running"]

            for session_id in running():
                try:
                    client.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
                except CallError as exc:
                    if exc.code != ErrorCode.NO_RUNNING_TURN:  # it ended meanwhile
                        raise
            wait_until(lambda: not running(), "every turn cancelled")

    def raw(self, headers: dict[str, str] | None = None) -> WebSocket:
        auth = {"Authorization": f"Bearer {self.token}"}
        return WebSocket.connect("127.0.0.1", self.port, headers=headers or auth)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop_attached(self, *clients: Client, timeout: float = 15.0) -> int:
        """SIGTERM the daemon while `clients` are connected, reading each until the daemon
        closes it: a client that answers the close frame at once spares the daemon its wait
        for one that does not read. Returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        for client in clients:
            with suppress(ConnectionClosed):
                while True:
                    client.next_notification(timeout=timeout)
        return self.proc.wait(timeout=timeout)


def start_daemon(
    home: Home,
    workspace: Path,
    *extra: str,
    timeout: float = 15.0,
    cwd: Path | None = None,
    exec_: bool = False,
) -> DaemonProcess:
    """The daemon for `workspace` as a subprocess of `home`, once its discovery file names it;
    killed again if it exits, stalls or this is interrupted before then. Its commands get
    `KILL_GRACE` after SIGTERM, unless `extra` says otherwise.

    It is forked from this test process's fork server (tests/forkserver.py), which has made
    the imports a start pays once, unless `exec_` (or TETHER_TEST_EXEC_DAEMONS=1 for all)
    asks for `python -m tether.daemon` itself."""
    log = open(home.root / f"daemon-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    discovery = home.discovery_path(workspace)
    old = discovery.read_bytes() if discovery.exists() else None
    argv = ["--workspace", str(workspace), "--kill-grace", str(KILL_GRACE), *extra]
    proc: DaemonProc
    if exec_ or os.environ.get("TETHER_TEST_EXEC_DAEMONS") == "1":
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.daemon", *argv],
            env=home.env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    else:
        proc = fork_server().spawn(argv, home.env, cwd or Path.cwd(), log)
    log.close()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if discovery.exists() and discovery.read_bytes() != old:
                info = home.read_discovery(workspace)
                if info is not None and info.pid == proc.pid:
                    return DaemonProcess(home, workspace, proc)
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited with {proc.returncode}; see {home.root}")
            time.sleep(0.01)
        raise AssertionError("daemon did not start")
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        raise


class ForkedProcess:
    """A daemon the fork server started: the part of `subprocess.Popen` the tests use. Its
    exit code comes from the server, which is its parent."""

    def __init__(self, server: "ForkServer", pid: int, argv: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._server.exit_code(self.pid, timeout=timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


DaemonProc = subprocess.Popen[bytes] | ForkedProcess


class ForkServer:
    """This process's end of tests/forkserver.py: spawn requests go out one at a time, and a
    thread collects the exit codes the server reports."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen(
            [sys.executable, "-P", str(REPO / "tests" / "forkserver.py"), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # a worker's stdout may be its channel to pytest-xdist
        )
        theirs.close()
        self._control = ours
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._spawned: list[int] = []
        self._exits: dict[int, int] = {}
        self._gone = False
        self.pid = self._server.pid
        threading.Thread(target=self._read, name="fork-server", daemon=True).start()

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: io.IOBase
    ) -> ForkedProcess:
        request = {"argv": argv, "env": env, "cwd": str(cwd)}
        with self._lock:
            socket.send_fds(self._control, [json.dumps(request).encode()], [log.fileno()])
            with self._changed:
                assert self._changed.wait_for(lambda: self._spawned or self._gone, timeout=30)
                assert not self._gone, "the fork server has exited"
                pid = self._spawned.pop()
        return ForkedProcess(self, pid, argv)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._gone, timeout=timeout)
            return self._exits.get(pid)

    def _read(self) -> None:
        while message := self._control.recv(65536):
            report = json.loads(message)
            with self._changed:
                if "spawned" in report:
                    self._spawned.append(report["spawned"])
                else:
                    self._exits[report["exited"]] = report["code"]
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()


@functools.cache
def fork_server() -> ForkServer:
    """This test process's fork server, started at its first daemon."""
    return ForkServer()


SHADOWED_MODULES = (
    "tether/__init__.py",
    "tether/daemon/__init__.py",
    "tether/daemon/__main__.py",
    "tether/clients/__init__.py",
    "tether/clients/locate.py",
    "tether/clients/core/__init__.py",
    "tether/clients/core/locate.py",
    "tether/clients/cli/__init__.py",
    "tether/clients/cli/main.py",
)
"""The modules tether's entry points run, as a workspace could shadow them."""


STUCK_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b'{"pid": %d, "state": "starting", "startedAt": %f}' % (os.getpid(), time.time() - 60))
print("holding", flush=True)
time.sleep(120)
"""
"""`python -c STUCK_HOLDER LOCK`: a process that took the lock file LOCK a minute ago, says
`holding`, and never serves."""


def run_installed(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed `tether` command (the script beside this Python), as a user runs it, in
    environment `env`."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("tether")), *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def plant_shadowing_package(workspace: Path, marker: Path) -> None:
    """Give `workspace` a `tether` package of its own whose every module, once imported,
    appends its process's argv to `marker`: the hostile repository of the tests that no Python
    of a workspace runs in tether's processes."""
    code = (
        f"import sys\nwith open({str(marker)!r}, 'a') as f:\n    f.write(repr(sys.argv) + '\\n')\n"
    )
    for name in SHADOWED_MODULES:
        module = workspace / name
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(code)


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> float:
    """Poll `condition` until it holds and return the seconds that took; fail with `what`
    after `timeout`. Only for what no event reports (another process's state); a model request
    has `ModelServer.wait_for_requests`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - start


def run_cli(
    home: Home,
    *args: str,
    cwd: Path | None = None,
    timeout: float = 30.0,
    stdin: str | bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess of `home`; `stdin` is piped into it (else it reads /dev/null)."""
    if isinstance(stdin, bytes):
        done = subprocess.run(
            [sys.executable, "-P", "-m", "tether.clients.cli.main", *args],
            env=home.env,
            cwd=cwd,
            capture_output=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )
    return subprocess.run(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", *args],
        env=home.env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )


def cli(
    home: Home,
    *args: str,
    cwd: Path | None = None,
    stdin: str | bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tether *args` called in this process (`tether.clients.cli.main.main`), as `run_cli`
    would run it: `home`'s environment, `stdin` as a file (else /dev/null), stdout and stderr
    captured. For tests whose subject is what a command says and does, not its process: it
    saves a Python start per command. A daemon it starts is this process's child (reaped once
    it exits, so that it never looks alive)."""
    from tether.clients.cli.main import main
    from tether.clients.core import discovery

    out, err = io.StringIO(), io.StringIO()
    with ExitStack() as stack:
        if stdin is None:
            source = stack.enter_context(open(os.devnull))
        else:
            source = stack.enter_context(tempfile.TemporaryFile("w+b"))
            source.write(stdin.encode() if isinstance(stdin, str) else stdin)
            source.seek(0)
            source = stack.enter_context(io.TextIOWrapper(source))
        stack.enter_context(home.activated())
        if cwd is not None:
            stack.enter_context(chdir(cwd))
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin, sys.stdout, sys.stderr = source, out, err
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
            gc.unfreeze()  # `main` freezes what it made, fit for a process that ends soon
            # Reap the daemons it spawned that have exited, from the list the spawning module
            # keeps (a zombie would count as alive to a pid probe; `alive` already says not).
            spawned: list[subprocess.Popen[bytes]] = getattr(discovery, "_spawned", [])
            for child in spawned:
                child.poll()
    return subprocess.CompletedProcess(["tether", *args], code, out.getvalue(), err.getvalue())


def create_session(client: Client) -> str:
    return client.call(SESSION_CREATE, SessionCreateParams()).session.id


def attach(
    client: Client, session_id: str, after: Cursor | None = None, role: str = "controller"
) -> SessionAttachResult:
    return client.call(
        SESSION_ATTACH,
        SessionAttachParams(session_id=session_id, after=after, role=role),  # type: ignore[arg-type]
    )


def start_turn(client: Client, session_id: str, text: str) -> str:
    return client.call(TURN_START, TurnStartParams(session_id=session_id, text=text)).turn_id


def collect_until_turn_end(
    client: Client, session_id: str, timeout: float = 20.0
) -> list[SessionEventParams]:
    """Every session/event of `session_id` up to and including a turn_completed."""
    events: list[SessionEventParams] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no turn_completed within {timeout} s; got {len(events)} events")
        method, params = client.next_notification(timeout=remaining)
        if method != "session/event":
            continue
        assert isinstance(params, SessionEventParams)
        if params.session_id != session_id:
            continue
        events.append(params)
        if isinstance(params.event, TurnCompleted):
            return events


def raw_call(ws: WebSocket, frame: bytes | str, timeout: float = 10.0) -> dict[str, Any]:
    ws.send(frame)
    reply = msgspec.json.decode(ws.recv(timeout=timeout))
    assert isinstance(reply, dict)
    return reply  # type: ignore[return-value]


def raw_request(
    ws: WebSocket, method: str, params: object, request_id: RequestId = "r1"
) -> dict[str, Any]:
    """Send one request frame; return the next frame, decoded."""
    return raw_call(ws, request_frame(request_id, method, params))


def read_events(
    client: Client,
    session_id: str,
    until: Callable[[list[SessionEventParams]], bool],
    timeout: float = 10.0,
) -> list[SessionEventParams]:
    """Read this session's events until `until(events_so_far)` holds."""
    events: list[SessionEventParams] = []
    deadline = time.monotonic() + timeout

    def unmet() -> AssertionError:
        # Which events did come says where the session stopped (a turn that ended with a text
        # answer, say, instead of the tool call the test waits to be approved).
        got = ", ".join(type(e.event).__name__ for e in events) or "none"
        return AssertionError(f"condition not met within {timeout} s; events: {got}")

    while not until(events):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise unmet()
        try:
            method, params = client.next_notification(timeout=remaining)
        except TimeoutError:
            raise unmet() from None
        assert method == "session/event", (method, params)
        assert isinstance(params, SessionEventParams)
        if params.session_id == session_id:
            events.append(params)
    return events


def deltas_at_least(count: int) -> Callable[[list[SessionEventParams]], bool]:
    def enough(events: list[SessionEventParams]) -> bool:
        return sum(isinstance(e.event, ItemDelta) for e in events) >= count

    return enough


def completed_items(events: list[SessionEventParams]) -> list[AnyItem]:
    """The items of these events' `item_completed`s, in order."""
    return [e.event.item for e in events if isinstance(e.event, ItemCompleted)]


def alive(pid: int) -> bool:
    """Running (not a zombie), read straight from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def tagged(marker: str) -> list[int]:
    """The live processes (not zombies) whose environment holds `MARK=marker`, wherever they
    run: in a sandbox's pid namespace too, where the pids a command prints are not ours."""
    found: list[int] = []
    needle = f"MARK={marker}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def group_survivors(pgid: int) -> list[str]:
    """Members of process group `pgid` that are not zombies, according to ps."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in out.splitlines()
        if int(line.split()[1]) == pgid and not line.split()[2].startswith("Z")
    ]


@contextmanager
def read_only_folder(folder: Path) -> Generator[None]:
    """Make `folder` refuse new entries, for real: root ignores modes, so for root the folder
    is made immutable (`chattr +i`); anyone else gets mode 0555. Skips when neither can be."""
    import pytest

    if os.geteuid() != 0:
        saved = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(saved)
        return
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make {folder} read-only as root: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def read_snapshot(client: Client, session_id: str) -> SessionSnapshot:
    return client.call(SESSION_READ, SessionRef(session_id=session_id)).snapshot


def tool_calls(events: list[SessionEventParams]) -> list[ToolCall]:
    """The tool calls these events completed, in order."""
    return [item for item in completed_items(events) if isinstance(item, ToolCall)]


def command_step(command: str) -> dict[str, object]:
    """A model step asking for one `run_command` of `command`."""
    return {
        "tool_calls": [
            {"name": "run_command", "arguments": {"command": command, "description": "test"}}
        ]
    }


def numbered(count: int) -> str:
    """Text that splits into `count` distinct six-character chunks: `<0000><0001>...`."""
    return "".join(f"<{i:04d}>" for i in range(count))


def tool_calls_answered(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered by tool messages right after it (OpenAI rule)."""
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        ids = [call["id"] for call in message["tool_calls"]]
        answers = messages[index + 1 : index + 1 + len(ids)]
        assert [m["role"] for m in answers] == ["tool"] * len(ids), messages
        assert sorted(m["tool_call_id"] for m in answers) == sorted(ids), messages
    asked = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])}
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert asked == answered


def persisted_events(home: Home, workspace: Path, session_id: str) -> list[tuple[int, AnyEvent]]:
    """The session's (seq, event)s as the daemon wrote them to its database (it may be running:
    the database is in WAL mode, so a reader sees what is committed)."""
    with closing(sqlite3.connect(home.database_path(workspace))) as db:
        rows = db.execute(
            "SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    return [(seq, msgspec.json.decode(body, type=AnyEvent)) for seq, body in rows]


def require_program(path_or_name: str, why: str) -> str:
    """The full path of a system program a test runs for real (bwrap, sshd). Missing, the test
    is skipped with `why` — or fails where `TETHER_REQUIRE_SYSTEM_TOOLS` is set, as CI sets it
    after installing them, so that a broken install cannot pass as a skip."""
    import shutil

    import pytest

    found = path_or_name if os.access(path_or_name, os.X_OK) else shutil.which(path_or_name)
    if found:
        return found
    message = f"{path_or_name} is not installed ({why}); `bash .ci/install-system` installs it"
    if os.environ.get("TETHER_REQUIRE_SYSTEM_TOOLS"):
        pytest.fail(message)
    pytest.skip(message)


def require_sandbox_network() -> None:
    """What a command sandbox with the network needs: slirp4netns, and a /dev/net/tun this
    process may open (a container may have none). Missing, as `require_program`."""
    import pytest

    require_program("slirp4netns", "a sandbox with the network gets its own through it")
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        message = "/dev/net/tun cannot be opened here (slirp4netns needs it)"
        if os.environ.get("TETHER_REQUIRE_SYSTEM_TOOLS"):
            pytest.fail(message)
        pytest.skip(message)
