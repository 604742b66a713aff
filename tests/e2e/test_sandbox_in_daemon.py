"""The command sandbox in the real daemon subprocess: what only a process proves. At its start
the daemon tries the sandbox once and logs why commands cannot run; a sandboxed background
process, started without asking in mode `edits`, dies with a daemon killed by SIGKILL (pid 1 of
its namespace goes with bwrap, and everything in it with pid 1); a sandboxed command, with and
without the network, reaches none of the daemon's secrets, its port, the user's sockets or
keys."""

import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_workspace
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    create_session,
    read_events,
    require_program,
    require_sandbox_network,
    start_daemon,
    tagged,
    wait_until,
)
from tether.protocol.events import ItemCompleted
from tether.protocol.items import ToolCall
from tether.protocol.methods import TURN_START, TurnStartParams
from tether.testing import ModelServer

WHY = "the command sandbox runs commands under bubblewrap"
PROBE = Path(__file__).resolve().parent.parent / "sandbox_probe.py"


def write_config(home: Home, text: str) -> None:
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)


def test_the_daemon_says_at_its_start_that_sandboxed_commands_cannot_run(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-bwrap"
    write_config(home, f'sandbox = "bwrap"\nsandbox_bwrap = "{missing}"\n')
    daemon = start_daemon(home, workspace)
    try:
        log = home.log_path(workspace)
        wait_until(
            lambda: log.exists() and "is not installed, so commands do not run" in log.read_text(),
            "no sandbox warning in the daemon's log",
        )
        status = cli(home, "daemon", "status", "-w", str(workspace))
        assert "  sandbox   bwrap, no network" in status.stdout
        assert "commands do not run: the command sandbox is on" in status.stdout
        assert f"bubblewrap ({missing}) is not installed" in status.stdout
    finally:
        daemon.kill()


@pytest.mark.parametrize("network", [False, True], ids=["no network", "network"])
def test_a_sandboxed_background_process_dies_with_a_killed_daemon(
    network: bool, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    bwrap = require_program("bwrap", WHY)
    if network:
        require_sandbox_network()
    write_config(
        home,
        f'sandbox = "bwrap"\nsandbox_bwrap = "{bwrap}"\nsandbox_network = {str(network).lower()}\n',
    )
    marker = uuid.uuid4().hex
    home.env["MARK"] = marker
    call = {
        "name": "run_command",
        "arguments": {
            "command": "sleep 300 & setsid sleep 300 & wait",
            "description": "a server",
            "background": True,
        },
    }
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "started"}]})
    daemon = start_daemon(home, workspace)
    try:
        with daemon.client("a") as client:
            session_id = create_session(client)
            attach(client, session_id)
            # The default mode (edits): a sandboxed command does not ask.
            client.call(TURN_START, TurnStartParams(session_id=session_id, text="serve"))
            read_events(
                client,
                session_id,
                lambda evs: any(
                    isinstance(e.event, ItemCompleted)
                    and isinstance(e.event.item, ToolCall)
                    and e.event.item.status == "completed"
                    for e in evs
                ),
            )
        # bwrap, pid 1, the shell and two sleeps, one of them in a session of its own (the
        # daemon carries the variable too); with the network, the launcher and slirp4netns.
        tree = lambda: [pid for pid in tagged(marker) if pid != daemon.proc.pid]  # noqa: E731
        members = 7 if network else 5
        wait_until(lambda: len(tree()) == members, "the sandboxed tree did not start")
    finally:
        daemon.kill()
    wait_until(lambda: tagged(marker) == [], "the sandboxed tree outlived the daemon")


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A temporary folder outside /tmp: the sandbox's /tmp is empty anyway, so secrets kept
    under it would prove nothing."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        yield Path(folder).resolve()


def unix_listener(address: str | bytes) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen()
    server.setblocking(False)
    return server


def run_in_a_turn(daemon: DaemonProcess, model_server: ModelServer, command: str) -> str:
    """What `command` printed, run by the agent in mode `edits` (sandboxed: nobody asked)."""
    call = {"name": "run_command", "arguments": {"command": command, "description": "probe"}}
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "done"}]})
    with daemon.client("a") as client:
        session_id = create_session(client)
        attach(client, session_id)
        client.call(TURN_START, TurnStartParams(session_id=session_id, text="probe"))
        events = read_events(
            client,
            session_id,
            lambda evs: any(
                isinstance(e.event, ItemCompleted) and isinstance(e.event.item, ToolCall)
                for e in evs
            ),
        )
    (item,) = [
        e.event.item
        for e in events
        if isinstance(e.event, ItemCompleted) and isinstance(e.event.item, ToolCall)
    ]
    assert item.status == "completed", item.output
    return item.output or ""


@pytest.mark.parametrize("network", [False, True], ids=["no network", "network"])
def test_a_sandboxed_command_reaches_no_secret_of_the_daemon_or_the_user(
    network: bool, outside_tmp: Path, model_server: ModelServer
) -> None:
    bwrap = require_program("bwrap", WHY)
    if network:
        require_sandbox_network()
    home = Home(outside_tmp / "user", model_server.base_url)
    workspace = make_workspace(outside_tmp / "project")
    api_key = f"sk-config-{uuid.uuid4().hex}"
    write_config(
        home,
        f'sandbox = "bwrap"\nsandbox_bwrap = "{bwrap}"\n'
        f'sandbox_network = {str(network).lower()}\n[provider]\napi_key = "{api_key}"\n',
    )
    token = uuid.uuid4().hex * 2
    token_file = outside_tmp / "secrets" / "token"
    token_file.parent.mkdir()
    token_file.write_text(token)
    key = Path(home.env["HOME"]) / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key_text = f"PRIVATE KEY {uuid.uuid4().hex}"
    key.write_text(key_text)
    bus, agent = home.runtime / "bus", home.runtime / "agent.sock"
    home.env |= {
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={bus}",
        "SSH_AUTH_SOCK": str(agent),
        "DISPLAY": ":99",
    }
    abstract = f"tether-test-{uuid.uuid4().hex}"
    listeners = [unix_listener(str(bus)), unix_listener(str(agent))]
    listeners.append(unix_listener(b"\0" + abstract.encode()))
    try:
        # The probe runs from the workspace: the checkout may lie under /tmp, which the sandbox
        # replaces with its own.
        probe = workspace / PROBE.name
        shutil.copyfile(PROBE, probe)
        daemon = start_daemon(home, workspace, "--token-file", str(token_file))
        try:
            config = home.root / "config" / "tether" / "config.toml"
            spec = {
                "read": [
                    str(token_file),
                    str(config),
                    str(key),
                    str(home.discovery_path(workspace)),
                ],
                "list": [str(home.root / "data" / "tether"), str(home.root / "state" / "tether")],
                "unix": [str(bus), str(agent)],
                "abstract": [abstract],
                "tcp": [["127.0.0.1", daemon.port]],
                "env": ["DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "DISPLAY"],
            }
            python = os.path.realpath(sys.executable)
            command = f"{python} -I {probe} {shlex.quote(json.dumps(spec))}"
            output = run_in_a_turn(daemon, model_server, command)
        finally:
            daemon.kill()
        # With the network, slirp4netns ends with the sandbox, before the command's result.
        assert "left running" not in output
        found = json.loads(output.splitlines()[1])
        for secret in (token, api_key, key_text):
            assert secret not in output
        # A hidden file cannot be opened (a device stands over it); a hidden folder is empty.
        assert all(got.startswith("failed") for got in found["read"].values()), found["read"]
        assert set(found["list"].values()) == {"ok: []"}
        for kind in ("unix", "abstract", "tcp"):
            assert all(got.startswith("failed") for got in found[kind].values()), found[kind]
        assert set(found["env"].values()) == {"<unset>"}
        for listener in listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()  # nothing reached it
    finally:
        for listener in listeners:
            listener.close()
