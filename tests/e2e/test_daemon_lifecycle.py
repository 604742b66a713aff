"""The daemon's life: discovery, single instance, CLI start/stop/status, auto-start, idle exit,
where it writes, and surviving clients that vanish. Real processes, real sockets."""

import json
import os
import re
import signal
import socket
import sqlite3
import stat
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Generator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import msgspec
import platformdirs
import pytest

from tests.support import (
    STUCK_HOLDER,
    DaemonProcess,
    Home,
    alive,
    attach,
    cli,
    collect_until_turn_end,
    create_session,
    persisted_events,
    raw_call,
    run_cli,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.clients.core.discovery import probe_lock
from tether.clients.core.rpc import Client
from tether.clients.core.websocket import ConnectionClosed, WebSocket
from tether.protocol.discovery import workspace_key
from tether.protocol.events import TurnCompleted
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    DAEMON_STATUS,
    SESSION_READ,
    DaemonStatusResult,
    InitializeParams,
    SessionRef,
)
from tether.testing import ModelServer


def _stop_with_cli(daemon: DaemonProcess, home: Home, workspace: Path) -> tuple[int, str, str]:
    """Run `tether daemon stop` and reap the daemon meanwhile: it is this process's child, and
    an unreaped zombie would look alive to the CLI. Returns the CLI's code, stdout, stderr."""
    cli = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "tether.clients.cli.main",
            "daemon",
            "stop",
            "-w",
            str(workspace),
        ],
        env=home.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.proc.wait(timeout=20) == 0
        stdout, stderr = cli.communicate(timeout=20)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    return cli.returncode, stdout, stderr


def _status(daemon: DaemonProcess) -> DaemonStatusResult:
    with daemon.client("status-probe") as client:
        return client.call(DAEMON_STATUS)


def _client_count(client: Client) -> int:
    return client.call(DAEMON_STATUS).clients


def _wait_for_clients(client: Client, count: int) -> None:
    """Until the daemon counts `count` connections: one an earlier test closed may not have
    been dropped yet (the daemon is shared)."""
    wait_until(lambda: _client_count(client) == count, f"{count} clients")


def _terminate(pid: int) -> None:
    """SIGTERM a daemon that is not our child; SIGKILL it if it does not exit in time."""
    os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not alive(pid), f"daemon {pid} did not stop on SIGTERM", 10)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        raise


@contextmanager
def _cleanup_daemon(home: Home, workspace: Path) -> Generator[None]:
    """Stop whatever daemon the CLI started for `workspace` when the test ends (pass or fail)."""
    try:
        yield
    finally:
        info = home.read_discovery(workspace)
        if info is not None and alive(info.pid):
            _terminate(info.pid)


# --- 1. discovery file --------------------------------------------------------------------------


def test_discovery_file_is_private_complete_and_removed_on_sigterm(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    path = home.discovery_path(workspace)
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.stat().st_uid == os.getuid()
    data = json.loads(path.read_bytes())
    assert data["pid"] == daemon.proc.pid
    assert isinstance(data["port"], int)
    assert 0 < data["port"] < 65536
    token = data["token"]
    assert isinstance(token, str)
    assert len(token) == 64
    assert all(c in "0123456789abcdef" for c in token)
    assert data["protocolVersion"] == 1
    assert data["workspace"] == str(workspace.resolve())
    assert isinstance(data["daemonVersion"], str)
    # No temporary file is left next to it.
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []
    # The port and token in the file are the ones that work.
    assert _status(daemon).pid == daemon.proc.pid

    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=10) == 0
    assert not path.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", data["port"]), timeout=2).close()


def test_sigterm_right_after_the_discovery_file_appears_stops_cleanly(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    # The discovery file says "ready"; a SIGTERM from then on must be a clean stop (exit 0,
    # file removed), not the default action of the signal (killed, stale file left behind).
    # The window is small, so the files are watched without sleeping, and five daemons (of as
    # many workspaces) started at once, each signalled the moment its file appears.
    workspaces = [workspace]
    for n in range(1, 5):
        workspaces.append(tmp_path / f"project-{n}")
        workspaces[-1].mkdir()
    discoveries = [home.discovery_path(w) for w in workspaces]
    procs = [
        subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(w)],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for w in workspaces
    ]
    try:
        waiting = dict(enumerate(discoveries))
        deadline = time.monotonic() + 30
        while waiting:
            for n, discovery in list(waiting.items()):
                if discovery.exists():
                    procs[n].send_signal(signal.SIGTERM)
                    del waiting[n]
                else:
                    assert procs[n].poll() is None, f"daemon {n} exited with {procs[n].returncode}"
            assert time.monotonic() < deadline, "the daemons did not start"
        codes = [proc.wait(timeout=10) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert codes == [0] * 5, "SIGTERM right after startup gave these exit codes"
    assert [d for d in discoveries if d.exists()] == [], "stale discovery files"


def test_each_daemon_has_a_fresh_token(home: Home, workspace: Path) -> None:
    first = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        token = first.token
        assert _status(first).pid == first.proc.pid  # fully up (see the SIGTERM race test)
        assert first.stop() == 0
    finally:
        if first.proc.poll() is None:
            first.kill()
    second = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        assert second.token != token
        assert second.proc.pid != first.proc.pid
        assert _status(second).pid == second.proc.pid
    finally:
        assert second.stop() == 0


def test_sigterm_interrupts_turns_and_closes_clients_cleanly(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    # Stopping: the running turn ends `interrupted` and attached clients see that event, then a
    # close frame (1001, going away) rather than a dropped TCP connection.
    model_server.set_script({"steps": [{"text": "never sent", "delay_ms": 10_000}]})
    with daemon.client("watcher") as client:
        session_id = create_session(client)
        attach(client, session_id)
        turn_id = start_turn(client, session_id, "take forever")
        model_server.wait_for_requests(1)
        daemon.proc.send_signal(signal.SIGTERM)
        events = collect_until_turn_end(client, session_id, timeout=10)
        last = events[-1].event
        assert isinstance(last, TurnCompleted)
        assert (last.turn_id, last.status) == (turn_id, "interrupted")
        with pytest.raises(ConnectionClosed) as closed:
            client.next_notification(timeout=10)
        assert closed.value.code == 1001
    assert daemon.proc.wait(timeout=10) == 0
    assert not home.discovery_path(workspace).exists()
    # The interruption was persisted: a new daemon reports the turn as interrupted.
    successor = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with successor.client("reader") as reader:
            read = reader.call(SESSION_READ, SessionRef(session_id=session_id))
        assert [(t.id, t.status) for t in read.snapshot.turns] == [(turn_id, "interrupted")]
    finally:
        assert successor.stop() == 0


# --- 2. one daemon per workspace ----------------------------------------------------------------


@pytest.mark.shared_daemon
def test_second_daemon_for_same_workspace_exits_3(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    before = home.discovery_path(workspace).read_bytes()
    second = subprocess.run(
        [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=15,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert second.returncode == 3, second.stderr
    assert "already serves" in second.stderr
    # The first daemon is untouched: same discovery file, still serving.
    assert home.discovery_path(workspace).read_bytes() == before
    assert daemon.proc.poll() is None
    status = _status(daemon)
    assert status.pid == daemon.proc.pid
    assert status.workspace == str(workspace.resolve())


@pytest.mark.shared_daemon
def test_another_workspace_gets_its_own_daemon(
    daemon: DaemonProcess, home: Home, tmp_path: Path
) -> None:
    other = tmp_path / "other-project"
    other.mkdir()
    second = start_daemon(home, other, "--idle-timeout", "0")
    try:
        assert second.port != daemon.port
        assert second.token != daemon.token
        assert _status(second).workspace == str(other.resolve())
        assert _status(daemon).pid == daemon.proc.pid
    finally:
        assert second.stop() == 0
    assert home.discovery_path(daemon.workspace).exists()


# --- 3. the CLI's daemon commands ---------------------------------------------------------------


@pytest.mark.shared_daemon
def test_cli_daemon_start_and_status_report_the_running_daemon(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    w = str(workspace)
    pid = daemon.proc.pid
    started = cli(home, "daemon", "start", "-w", w)
    assert started.returncode == 0, started.stderr
    assert "already running" in started.stdout
    assert f"pid {pid}" in started.stdout
    started_json = cli(home, "daemon", "start", "--json", "-w", w)
    assert json.loads(started_json.stdout)["started"] is False
    assert json.loads(started_json.stdout)["pid"] == pid

    status = cli(home, "daemon", "status", "--json", "-w", w)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True
    assert data["pid"] == pid
    assert data["port"] == daemon.port
    assert data["workspace"] == str(workspace.resolve())
    text = cli(home, "daemon", "status", "-w", w)
    assert text.returncode == 0, text.stderr
    assert f"pid {pid}" in text.stdout
    # Neither command started another daemon or disturbed this one.
    info = home.read_discovery(workspace)
    assert info is not None
    assert info.pid == pid
    assert daemon.proc.poll() is None


def test_shutdown_request_is_answered_before_the_daemon_stops(daemon: DaemonProcess) -> None:
    # JSON-RPC: every request with an id gets a response. `tether daemon stop` relies on it.
    ws = _initialized_raw(daemon)
    try:
        ws.send(request_frame("bye", "daemon/shutdown", {}))
        try:
            reply = msgspec.json.decode(ws.recv(timeout=10))
        except ConnectionClosed as exc:
            raise AssertionError(f"daemon/shutdown got no response: {exc}") from exc
        assert reply == {"jsonrpc": "2.0", "id": "bye", "result": {}}
    finally:
        ws.close()
    assert daemon.proc.wait(timeout=10) == 0


def test_cli_daemon_stop_stops_it_and_says_so(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    pid = daemon.proc.pid
    code, stdout, stderr = _stop_with_cli(daemon, home, workspace)
    assert not home.discovery_path(workspace).exists()
    assert (code, stderr) == (0, "")
    assert f"stopped (pid {pid})" in stdout


def test_cli_daemon_status_then_start_after_the_daemon_stopped(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    w = str(workspace)
    pid = daemon.proc.pid
    assert _status(daemon).pid == pid  # fully up (see the SIGTERM race test)
    assert daemon.stop() == 0
    with _cleanup_daemon(home, workspace):
        gone = cli(home, "daemon", "status", "-w", w)
        assert gone.returncode == 1
        assert "no tether daemon is running" in gone.stdout
        gone_json = cli(home, "daemon", "status", "--json", "-w", w)
        assert gone_json.returncode == 1
        assert json.loads(gone_json.stdout)["running"] is False
        # Stopping what is not running is not an error, and starts nothing.
        assert cli(home, "daemon", "stop", "-w", w).returncode == 0
        assert home.read_discovery(workspace) is None

        restarted = cli(home, "daemon", "start", "--idle-timeout", "0", "-w", w)
        assert restarted.returncode == 0, restarted.stderr
        assert "started: pid " in restarted.stdout
        info = home.read_discovery(workspace)
        assert info is not None
        assert info.pid != pid
        assert f"pid {info.pid}" in restarted.stdout
        assert alive(info.pid)
        again = cli(home, "daemon", "status", "--json", "-w", w)
        assert again.returncode == 0, again.stderr
        data = json.loads(again.stdout)
        assert (data["running"], data["pid"], data["idleTimeout"]) == (True, info.pid, 0)


def test_cli_status_ignores_a_stale_discovery_file(home: Home, workspace: Path) -> None:
    # A daemon killed with SIGKILL cannot remove its file; clients must not trust it.
    victim = start_daemon(home, workspace, "--idle-timeout", "0")
    victim.kill()
    assert home.discovery_path(workspace).exists()
    result = cli(home, "daemon", "status", "-w", str(workspace))
    assert result.returncode == 1
    assert "no tether daemon is running" in result.stdout
    # And a new daemon can take over the workspace (the kernel released the lock).
    successor = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        assert _status(successor).pid == successor.proc.pid
    finally:
        assert successor.stop() == 0


# --- 4. auto-start ------------------------------------------------------------------------------


def test_cli_run_starts_a_daemon_when_none_runs(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "hi"}]})
    assert home.read_discovery(workspace) is None
    with _cleanup_daemon(home, workspace):
        result = run_cli(home, "run", "-w", str(workspace), "hello")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["hi"]
        info = home.read_discovery(workspace)
        assert info is not None
        assert alive(info.pid)
        assert info.workspace == str(workspace.resolve())
        assert len(model_server.requests) == 1
        # The daemon outlives the CLI: the next command finds it, with the session it ran.
        listed = run_cli(home, "sessions", "--json", "-w", str(workspace))
        assert listed.returncode == 0, listed.stderr
        assert [s["turnCount"] for s in json.loads(listed.stdout)] == [1]
        assert home.read_discovery(workspace) == info
        _terminate(info.pid)
        assert not home.discovery_path(workspace).exists()


def test_daemon_status_and_stop_do_not_start_one(home: Home, workspace: Path) -> None:
    # Every other command starts the daemon (tests/e2e/test_cli_first_contact.py).
    with _cleanup_daemon(home, workspace):
        stop = cli(home, "daemon", "stop", "-w", str(workspace))
        assert stop.returncode == 0
        assert "no tether daemon is running" in stop.stdout
        status = cli(home, "daemon", "status", "-w", str(workspace))
        assert status.returncode == 1
        assert home.read_discovery(workspace) is None


# --- 5. idle exit -------------------------------------------------------------------------------


def test_idle_daemon_exits_after_its_last_client_leaves(home: Home, workspace: Path) -> None:
    # When the timer fires, and that a connected client holds it off, is tests/unit/test_idle.py
    # (in virtual time); this is the daemon acting on it: a clean exit, saying why.
    daemon = start_daemon(home, workspace, "--idle-timeout", "0.2")
    try:
        with daemon.client("holder") as client:
            status = client.call(DAEMON_STATUS)
            assert (status.idle_timeout, status.clients) == (0.2, 1)
        assert daemon.proc.wait(timeout=10) == 0
        assert not home.discovery_path(workspace).exists()
        stops = [r for r in home.log_records(workspace) if r["msg"] == "shutting down"]
        assert [r["reason"] for r in stops] == ["idle for 0.2 s"]
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_idle_timer_waits_for_a_running_turn(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    # A turn that outlives the idle timeout with no client attached keeps the daemon up: had
    # the daemon left while it ran, the turn would be persisted as interrupted.
    model_server.set_script({"steps": [{"text": "slow answer", "delay_ms": 600}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0.2")
    try:
        with daemon.client("starter") as client:
            session_id = create_session(client)
            turn_id = start_turn(client, session_id, "take your time")
        assert daemon.proc.wait(timeout=10) == 0
        ends = [
            (e.turn_id, e.status)
            for _, e in persisted_events(home, workspace, session_id)
            if isinstance(e, TurnCompleted)
        ]
        assert ends == [(turn_id, "completed")]
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


# --- 6. where the daemon writes -----------------------------------------------------------------


@pytest.mark.shared_daemon
def test_everything_the_daemon_writes_is_under_the_isolated_home(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "stored"}]})
    result = cli(home, "run", "-w", str(workspace), "remember this")
    assert result.returncode == 0, result.stderr
    key = workspace_key(str(workspace.resolve()))
    database = home.database_path(workspace)
    assert database.is_file()
    assert database.stat().st_size > 0
    # Nothing for this workspace in the real user's folders.
    real_roots = {
        Path.home() / ".local" / "share" / "tether",
        Path.home() / ".local" / "state" / "tether",
        Path.home() / ".cache" / "tether",
        Path(platformdirs.user_data_dir("tether")),
        Path(platformdirs.user_log_dir("tether")),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no XDG_RUNTIME_DIR here: platformdirs warns
        real_roots.add(Path(platformdirs.user_runtime_dir("tether")))
    for root in real_roots:
        assert not (root / "workspaces" / key).exists(), root
        assert not (root / f"daemon-{key}.json").exists(), root
        assert not (root / f"daemon-{key}.lock").exists(), root
        assert not (root / f"daemon-{key}.log").exists(), root
    # Every regular file the daemon holds open is in the isolated home (or the workspace).
    fd_dir = Path(f"/proc/{daemon.proc.pid}/fd")
    if fd_dir.is_dir():
        targets: list[str] = []
        for fd in fd_dir.iterdir():
            # The table is live: a descriptor listed may be closed before it is read (the
            # socket of the CLI that just left, say).
            with suppress(FileNotFoundError):
                targets.append(os.readlink(fd))
        files = [Path(t) for t in targets if t.startswith("/") and not t.startswith("/dev/")]
        assert any(f == database for f in files), files
        for f in files:
            assert f.is_relative_to(home.root) or f.is_relative_to(workspace), f
    # Nothing was written into the workspace itself.
    assert sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*")) == [
        "README.md",
        "src",
        "src/app.py",
    ]


# --- 7. clients that vanish ---------------------------------------------------------------------


def _initialized_raw(daemon: DaemonProcess) -> WebSocket:
    ws = daemon.raw()
    reply = raw_call(ws, request_frame("init", "initialize", InitializeParams(client_name="v")))
    assert "result" in reply, reply
    return ws


def _reset(ws: WebSocket) -> None:
    """Drop the TCP connection with an RST: no close frame, no FIN."""
    ws._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws._sock.close()
    ws.close()  # the socket is already gone; this just marks the client closed


@pytest.mark.shared_daemon
def test_client_vanishing_does_not_crash_the_daemon(daemon: DaemonProcess) -> None:
    with daemon.client("observer") as observer:
        _wait_for_clients(observer, 1)

        # 1. The socket is closed without a close frame (FIN only).
        plain = _initialized_raw(daemon)
        assert _client_count(observer) == 2
        plain._sock.close()
        plain.close()
        wait_until(lambda: _client_count(observer) == 1, "FIN client not dropped", 5)

        # 2. The connection is reset (RST).
        reset = _initialized_raw(daemon)
        assert _client_count(observer) == 2
        _reset(reset)
        wait_until(lambda: _client_count(observer) == 1, "RST client not dropped", 5)

        # 3. The client dies halfway through sending a frame.
        half = _initialized_raw(daemon)
        payload = request_frame("x", "daemon/status", {})
        # A final text frame, masked with a zero key (the payload goes as is).
        frame = struct.pack("!BB", 0x81, 0x80 | len(payload)) + bytes(4) + payload
        half._sock.sendall(frame[: len(frame) // 2])
        assert _client_count(observer) == 2
        _reset(half)
        wait_until(lambda: _client_count(observer) == 1, "half-frame client not dropped", 5)

        # 4. The client dies mid-handshake (before the upgrade completes).
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgr")
        assert daemon.proc.poll() is None
        status = observer.call(DAEMON_STATUS)
        assert status.pid == daemon.proc.pid
        assert status.clients == 1

    # A brand-new client is served normally.
    assert _status(daemon).clients == 1


@pytest.mark.shared_daemon
def test_killed_client_process_is_dropped_and_its_turn_survives(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    # A real client process killed with SIGKILL while its turn runs: the daemon drops the
    # connection, keeps serving, and (closing never cancels a turn) finishes the turn. The
    # answer is held after its first delta until the client is gone.
    model_server.set_script(
        {"steps": [{"text": "finished anyway", "chunks": 2, "hold_at_chunks": [1]}]}
    )
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tether.clients.core.rpc import Client\n"
        "from tether.protocol.methods import SESSION_CREATE, TURN_START,"
        " SessionCreateParams, TurnStartParams\n"
        "client = Client.connect(Path(sys.argv[1]), autostart=False)\n"
        "sid = client.call(SESSION_CREATE, SessionCreateParams()).session.id\n"
        "client.call(TURN_START, TurnStartParams(session_id=sid, text='go'))\n"
        "print(sid, flush=True)\n"
        "time.sleep(60)\n"
    )
    with daemon.client("observer") as observer:
        victim = subprocess.Popen(
            [sys.executable, "-c", script, str(workspace)],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert victim.stdout is not None
            session_id = victim.stdout.readline().decode().strip()
            assert session_id, victim.stderr.read().decode() if victim.stderr else ""
            _wait_for_clients(observer, 2)
            victim.kill()
        finally:
            victim.kill()
            victim.communicate(timeout=10)
        wait_until(lambda: _client_count(observer) == 1, "killed client not dropped", 5)
        attached = attach(observer, session_id, role="observer")
        assert attached.snapshot is not None
        assert attached.snapshot.turns[-1].status == "running"
        model_server.release()
        events = collect_until_turn_end(observer, session_id, timeout=10)
        last = events[-1].event
        assert isinstance(last, TurnCompleted)
        assert last.status == "completed"
    assert daemon.proc.poll() is None
    info = home.read_discovery(workspace)
    assert info is not None
    assert info.pid == daemon.proc.pid


# --- 8. liveness is the workspace lock, not a pid -----------------------------------------------


def _daemon_pids(workspace: Path) -> list[int]:
    """Running (not zombie) daemon processes serving `workspace`, from /proc."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tether.daemon" in argv and str(workspace).encode() in argv and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _serving_lines(home: Home, workspace: Path) -> list[dict[str, Any]]:
    return [r for r in home.log_records(workspace) if r["msg"] == "daemon started"]


def test_the_cli_works_right_after_the_daemon_is_killed(home: Home, workspace: Path) -> None:
    # SIGKILLed and not yet reaped, the old daemon is a zombie: its pid still answers
    # kill(pid, 0) and its discovery file is still there. The lock was released all the same.
    victim = start_daemon(home, workspace, "--idle-timeout", "0")
    os.kill(victim.proc.pid, signal.SIGKILL)
    wait_until(lambda: not alive(victim.proc.pid), "the daemon did not die", 10)
    try:
        with _cleanup_daemon(home, workspace):
            assert home.read_discovery(workspace) == victim.info
            listed = run_cli(home, "sessions", "--json", "-w", str(workspace))
            assert listed.returncode == 0, listed.stderr
            assert json.loads(listed.stdout) == []
            info = home.read_discovery(workspace)
            assert info is not None
            assert info.pid != victim.proc.pid
    finally:
        victim.proc.wait(timeout=10)


def test_a_stale_discovery_file_naming_a_live_process_is_ignored(
    home: Home, workspace: Path
) -> None:
    unrelated = subprocess.Popen(["sleep", "60"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    stale = msgspec.json.encode(
        {
            "pid": unrelated.pid,
            "port": closed_port,
            "token": "0" * 64,
            "protocolVersion": 1,
            "daemonVersion": "0.0.0",
            "workspace": str(workspace.resolve()),
            "startedAt": 0.0,
        }
    )
    path = home.discovery_path(workspace)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(stale)
    try:
        with _cleanup_daemon(home, workspace):
            listed = run_cli(home, "sessions", "--json", "-w", str(workspace))
            assert listed.returncode == 0, listed.stderr
            info = home.read_discovery(workspace)
            assert info is not None
            assert info.pid != unrelated.pid
            assert unrelated.poll() is None  # nobody signalled it
            status = run_cli(home, "daemon", "status", "--json", "-w", str(workspace))
            assert json.loads(status.stdout)["pid"] == info.pid
    finally:
        unrelated.kill()
        unrelated.wait(timeout=10)


def test_a_daemon_whose_discovery_file_is_deleted_is_still_reached_and_stopped(
    home: Home, workspace: Path
) -> None:
    # It looks every 0.1 s instead of every second: the CLI waits for it either way.
    daemon = start_daemon(
        home, workspace, "--idle-timeout", "0", "--discovery-check-interval", "0.1"
    )
    try:
        path = home.discovery_path(workspace)
        path.unlink()
        listed = cli(home, "sessions", "--json", "-w", str(workspace))
        assert listed.returncode == 0, listed.stderr
        # The daemon put its file back (the CLI reached it through it, and started no other).
        assert home.read_discovery(workspace) == daemon.info
        assert daemon.proc.poll() is None

        path.unlink()
        code, stdout, stderr = _stop_with_cli(daemon, home, workspace)
        assert (code, stderr) == (0, "")
        assert f"stopped (pid {daemon.proc.pid})" in stdout
        assert not path.exists()
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()


def test_five_clients_starting_at_once_share_one_daemon(home: Home, workspace: Path) -> None:
    command = [sys.executable, "-P", "-m", "tether.clients.cli.main", "sessions", "--json"]
    with _cleanup_daemon(home, workspace):
        clients = [
            subprocess.Popen(
                [*command, "-w", str(workspace)],
                env=home.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(5)
        ]
        results = [(c.communicate(timeout=60), c.returncode) for c in clients]
        for (stdout, stderr), code in results:
            assert (code, stderr) == (0, "")
            assert json.loads(stdout) == []
        info = home.read_discovery(workspace)
        assert info is not None
        # Daemons that lost the race exit on their own; one is left, and only one ever served.
        wait_until(lambda: _daemon_pids(workspace) == [info.pid], "extra daemons remain", 10)
        assert len(_serving_lines(home, workspace)) == 1


def test_a_daemon_stuck_starting_is_reported_at_once_and_can_be_stopped(
    home: Home, workspace: Path
) -> None:
    # A process that took the workspace's lock a minute ago and never served: commands say so
    # (which pid, which log) instead of each waiting out the start timeout, and start nothing.
    lock = home.lock_path(workspace)
    lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", STUCK_HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
        for command in (("sessions",), ("daemon", "status"), ("daemon", "start")):
            result = cli(home, *command, "-w", str(workspace))
            assert result.returncode == 2, (command, result.stdout, result.stderr)
            assert re.search(rf"\(pid {holder.pid}\) has been starting for 6\d s", result.stderr)
            assert str(home.log_path(workspace)) in result.stderr
        assert home.read_discovery(workspace) is None
        assert _daemon_pids(workspace) == []

        stopped = cli(home, "daemon", "stop", "-w", str(workspace))
        assert (stopped.returncode, stopped.stderr) == (0, "")
        assert f"stopped (pid {holder.pid})" in stopped.stdout
        assert holder.wait(timeout=10) == -signal.SIGTERM
    finally:
        holder.kill()
        holder.communicate(timeout=10)


def test_sigterm_while_the_store_is_opening_stops_cleanly(home: Home, workspace: Path) -> None:
    # Another process holds the database locked, so the daemon's store waits for it (sqlite's
    # busy timeout) before it could serve. A SIGTERM meanwhile is a clean stop, now.
    database = home.database_path(workspace)
    database.parent.mkdir(parents=True)
    blocker = sqlite3.connect(database, isolation_level=None)
    try:
        blocker.execute("CREATE TABLE t (x)")
        blocker.execute("BEGIN EXCLUSIVE")
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.daemon", "--workspace", str(workspace)],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            log = home.log_path(workspace)
            wait_until(
                lambda: log.exists() and "opening the store" in log.read_text(),
                "the daemon did not reach its store",
                15,
            )
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    finally:
        blocker.close()
    assert code == 0, log.read_text()
    assert '"msg":"shutting down","reason":"signal SIGTERM"' in log.read_text()
    assert not home.discovery_path(workspace).exists()
    assert probe_lock(home.lock_path(workspace)) is None
