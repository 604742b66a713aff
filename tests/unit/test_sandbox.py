"""The command sandbox with the real bubblewrap: real commands through run_command, a real
listener on 127.0.0.1 outside the sandbox, real process trees; a turn over the scripted
model. What a sandboxed command can write (the workspace, its own /tmp) and cannot (the rest),
the network off and the line saying how to allow it, the network on, a missing or failing
bwrap (nothing runs, the error says why), background processes sandboxed and stopped as a
whole, and sandboxed commands running without asking in mode `edits`."""

import json
import os
import socket
import stat
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from tests.inprocess import running_sessions
from tests.support import group_survivors, require_program, require_sandbox_network, tagged
from tests.unit.test_live_settings import pooled_rig
from tether.clients.cli.commands.daemon import status_lines
from tether.daemon.config.sandbox import command_sandbox
from tether.daemon.config.settings import Config, ConfigError, parse_config
from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import run_to_completion
from tether.daemon.procs.sandbox import Sandbox, sandbox_problem
from tether.daemon.procs.table import ProcessTable
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.store import Store
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.command_kill import CommandKill
from tether.daemon.tools.command_output import CommandOutput
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.run_command import RunCommand
from tether.daemon.turn.permissions import CallFacts, PermissionPolicy
from tether.protocol.items import Notice, ToolCall
from tether.protocol.methods import DaemonStatusResult
from tether.testing import ModelServer

GRACE = 0.3
WHY = "the command sandbox runs commands under bubblewrap"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    require_program("bwrap", WHY)
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def marker() -> str:
    """A value for the MARK variable of the commands a test runs, to find their processes."""
    return uuid.uuid4().hex


def registry(marker: str = "") -> ToolRegistry:
    env = {**os.environ, "MARK": marker}
    return ToolRegistry([RunCommand(env=env, grace=GRACE), CommandOutput(), CommandKill()])


async def run(ctx: ToolContext, command: str, marker: str = "", **args: object) -> ToolResult:
    tools = registry(marker)
    params = tools.validate(
        "run_command", json.dumps({"command": command, "description": "test", **args})
    )
    assert not isinstance(params, str), params
    with trio.fail_after(30):
        return await tools.run("run_command", params, ctx)


async def test_a_command_writes_in_the_workspace_and_its_git_but_nowhere_else(
    ws: Path, tmp_path: Path
) -> None:
    beside = tmp_path / "beside"  # outside the workspace, in the real /tmp
    beside.mkdir()
    home = Path.home().resolve()
    assert not home.is_relative_to("/tmp")
    with tempfile.TemporaryDirectory(dir=home) as away:  # outside the workspace and /tmp
        command = (
            "echo in > made.txt; mkdir -p .git/hooks && echo hook > .git/hooks/x;"
            f" echo out > {beside}/out.txt; echo away > {away}/away.txt; echo done"
        )
        result = await run(ToolContext(ws, sandbox=Sandbox(workspace=ws)), command)
        assert not (Path(away) / "away.txt").exists()
    assert result.status == "completed"
    assert "Read-only file system" in result.output
    assert result.output.rstrip().endswith("done")
    assert (ws / "made.txt").read_text() == "in\n"
    assert (ws / ".git/hooks/x").read_text() == "hook\n"
    assert not (beside / "out.txt").exists()


def made_outside(path: str, text: str) -> bool:
    """Whether the daemon's own file system has `path` holding `text`."""
    try:
        return Path(path).read_text() == text
    except OSError:
        return False


async def test_tmp_is_private_empty_and_gone_with_the_command(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("the daemon's /tmp")
    ctx = ToolContext(ws, sandbox=Sandbox(workspace=ws))
    first = await run(
        ctx, f"cat {tmp_path}/outside.txt; echo mine > /tmp/made; cat /tmp/made; echo $TMPDIR"
    )
    assert "No such file or directory" in first.output
    assert first.output.splitlines()[-2:] == ["mine", "/tmp"]
    assert not made_outside("/tmp/made", "mine\n")
    # Only the path down to the workspace (its mount point) is in it, and nothing else.
    second = await run(ctx, "cat /tmp/made; find /tmp -mindepth 1 -not -type d")
    assert "No such file or directory" in second.output
    assert second.output.split("\n", 1)[1].strip().splitlines() == [
        "cat: /tmp/made: No such file or directory"
    ]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real TCP listener on 127.0.0.1, outside any sandbox."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def connect(server: socket.socket) -> str:
    port = server.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('on')"
    # The interpreter itself, not the virtual environment's link to it: a checkout under /tmp
    # (where CI may clone) keeps its .venv there, and the sandbox's /tmp is a fresh one.
    return f'{os.path.realpath(sys.executable)} -c "{code}"'


async def test_a_socket_fails_without_the_network_and_says_how_to_allow_it(
    ws: Path, listener: socket.socket
) -> None:
    result = await run(ToolContext(ws, sandbox=Sandbox(workspace=ws)), connect(listener))
    assert result.status == "completed"
    assert result.output.startswith("exit code 1")
    assert "Connection refused" in result.output
    assert "set sandbox_network = true in config.toml" in result.output
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached it


async def test_the_how_to_line_is_only_for_failures_that_read_like_the_network(
    ws: Path,
) -> None:
    ctx = ToolContext(ws, sandbox=Sandbox(workspace=ws))
    other = await run(ctx, "echo 'assertion failed'; exit 1")
    assert "sandbox_network" not in other.output
    succeeded = await run(ctx, "echo 'Connection refused, retrying'; exit 0")
    assert "sandbox_network" not in succeeded.output


def outward_address() -> str:
    """This machine's address on its way out (no packet is sent), or "" when it has only
    loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError:
            return ""
        address = probe.getsockname()[0]
    return "" if address.startswith("127.") else address


async def test_with_the_network_allowed_a_command_gets_out_but_not_to_the_host_s_loopback(
    ws: Path, listener: socket.socket
) -> None:
    require_sandbox_network()
    address = outward_address()
    if not address:
        pytest.skip("this machine has no address but loopback")
    with socket.create_server((address, 0)) as outside:
        outside.setblocking(False)
        ctx = ToolContext(ws, sandbox=Sandbox(workspace=ws, network=True))
        out = await run(ctx, connect(outside).replace("127.0.0.1", address))
        assert out.output.startswith("exit code 0"), out.output
        assert out.output.splitlines()[1:] == ["on"]
        accepted, _ = outside.accept()
        accepted.close()
    local = await run(ctx, connect(listener))
    assert "Connection refused" in local.output
    assert "sandbox_network" not in local.output  # the network is on: no advice
    with pytest.raises(BlockingIOError):
        listener.accept()


async def test_with_the_network_allowed_and_no_slirp4netns_nothing_runs(
    ws: Path, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-slirp4netns")
    sandbox = Sandbox(workspace=ws, network=True, slirp4netns=missing)
    result = await run(ToolContext(ws, sandbox=sandbox), "touch ran")
    assert result.status == "failed"
    assert f"slirp4netns ({missing}) is not installed" in result.output
    assert "would let them reach the daemon" in result.output
    assert "sandbox_network = false" in result.output
    assert not (ws / "ran").exists()


async def test_without_bwrap_nothing_runs_and_the_error_says_what_to_do(
    ws: Path, tmp_path: Path
) -> None:
    sandbox = Sandbox(workspace=ws, program=str(tmp_path / "no-such-bwrap"))
    table = ProcessTable(grace=GRACE)
    ctx = ToolContext(ws, sandbox=sandbox, services={"processes": table})
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            foreground = await run(ctx, "touch ran")
            background = await run(ctx, "touch ran", background=True)
            nursery.cancel_scope.cancel()
    for result in (foreground, background):
        assert result.status == "failed"
        assert "Nothing ran" in result.output
        assert f"bubblewrap ({tmp_path / 'no-such-bwrap'}) is not installed" in result.output
        assert 'sandbox = "off"' in result.output
    assert not (ws / "ran").exists()
    assert table.list() == []
    assert "is not installed" in sandbox_problem(sandbox)


async def test_a_bwrap_that_cannot_make_a_sandbox_is_reported_and_nothing_runs(
    ws: Path, tmp_path: Path
) -> None:
    # A real program standing in for bubblewrap where user namespaces are disabled.
    failing = tmp_path / "bwrap"
    failing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    sandbox = Sandbox(workspace=ws, program=str(failing))
    result = await run(ToolContext(ws, sandbox=sandbox), "touch ran")
    assert result.status == "failed"
    assert "cannot make one here (bwrap: No permissions to creating new namespace)" in (
        result.output
    )
    assert "User namespaces may be disabled" in result.output
    assert not (ws / "ran").exists()


@pytest.mark.parametrize("network", [False, True], ids=["no network", "network"])
async def test_a_background_process_is_sandboxed_and_stopped_as_a_whole(
    network: bool, ws: Path, tmp_path: Path, marker: str
) -> None:
    if network:
        require_sandbox_network()
    table = ProcessTable(grace=GRACE)
    sandbox = Sandbox(workspace=ws, network=network)
    ctx = ToolContext(ws, sandbox=sandbox, services={"processes": table})
    # bwrap, pid 1, the shell, two sleeps; with the network, the launcher and slirp4netns.
    members = 7 if network else 5
    # A member that leaves the group (setsid) still ends with the sandbox.
    script = f"sleep 300 & setsid sleep 300 & touch {tmp_path}/out; echo ready; wait"
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            started = await run(ctx, script, marker, background=True)
            assert "in the sandbox" in started.output
            managed = table.get("p1")
            while len(tagged(marker)) < members:  # noqa: ASYNC110 (nothing to wait on but /proc)
                await trio.sleep(0.02)
            members = tagged(marker)
            ours = os.readlink("/proc/self/ns/pid")
            assert {os.readlink(f"/proc/{pid}/ns/pid") for pid in members} - {ours}
            assert not (tmp_path / "out").exists()
            tools = registry(marker)
            params = tools.validate("command_kill", '{"id": "p1"}')
            assert not isinstance(params, str)
            killed = await tools.run("command_kill", params, ctx)
            assert killed.status == "completed"
            assert tagged(marker) == []
            assert group_survivors(managed.pid) == []
            assert managed.status == "killed"
            nursery.cancel_scope.cancel()


def test_sandboxed_commands_run_without_asking_in_mode_edits_only() -> None:
    facts = CallFacts(
        tool="run_command", kind="command", command="make && rm -rf build", sandboxed=True
    )
    policy = PermissionPolicy(mode="edits", sandbox=True)
    assert policy.decide(facts).action == "allow"
    # Without the sandbox, or for a tool that does not run in it, it asks as before.
    assert PermissionPolicy(mode="edits").decide(facts).action == "ask"
    unconfined = CallFacts(tool="command_kill", kind="command", command="stop p1")
    assert policy.decide(unconfined).action == "ask"
    # Mode ask still asks; deny and ask rules still apply; hidden characters still ask.
    assert PermissionPolicy(mode="ask", sandbox=True).decide(facts).action == "ask"
    denied = PermissionPolicy(mode="edits", sandbox=True, deny=["run_command(make *)"])
    assert denied.decide(facts).action == "deny"
    asked = PermissionPolicy(mode="edits", sandbox=True, ask=["run_command(make *)"])
    assert asked.decide(facts).action == "ask"
    hidden = CallFacts(tool="run_command", kind="command", command="ls\x1b[2K", sandboxed=True)
    assert policy.decide(hidden).action == "ask"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    found = Store(tmp_path / "tether.sqlite3")
    found.open()
    yield found
    found.close()


@pytest.fixture
async def model_client() -> AsyncIterator[list[OpenAIChatClient]]:
    clients: list[OpenAIChatClient] = []
    yield clients
    for client in clients:
        await client.aclose()


async def test_a_turn_runs_sandboxed_commands_without_asking_and_a_workspace_cannot_turn_it_off(
    ws: Path, tmp_path: Path, store: Store, model_client: list[OpenAIChatClient]
) -> None:
    (ws / ".tether").mkdir()
    (ws / ".tether/config.toml").write_text(
        'sandbox = "off"\nsandbox_network = true\nsandbox_allow_read = ["~/.ssh"]\n'
    )
    beside = tmp_path / "beside"
    beside.mkdir()
    command = f"echo in > made.txt && echo out > {beside}/out.txt"
    script = {
        "steps": [
            {
                "tool_calls": [
                    {
                        "name": "run_command",
                        "arguments": {"command": command, "description": "write two files"},
                    }
                ]
            },
            {"text": "ok"},
        ]
    }
    with trio.fail_after(30), ModelServer(script) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        model_client.append(client)
        models = FixedModel(client, Config(sandbox="bwrap"))
        async with running_sessions(store, ws, server, models=models) as sessions:
            session = await sessions.create()
            assert session.permission_mode == "edits"
            sessions.start_turn(session, TurnRequest(text="go"))
            await sessions.wait_idle(session.id)
    # With no client to answer, an approval would have held the turn until fail_after.
    assert session.turns[-1].status == "completed"
    assert session.pending_approvals == {}
    (call,) = [item for item in session.items() if isinstance(item, ToolCall)]
    assert call.status == "completed"
    assert (ws / "made.txt").read_text() == "in\n"
    assert not (beside / "out.txt").exists()  # still sandboxed
    (notice,) = [item for item in session.items() if isinstance(item, Notice)]
    assert notice.code == "workspace_config"
    assert "sandbox, sandbox_network, sandbox_allow_read" in notice.message


async def test_a_turn_says_when_the_sandbox_cannot_be_made(
    ws: Path, tmp_path: Path, store: Store, model_client: list[OpenAIChatClient]
) -> None:
    missing = str(tmp_path / "no-such-bwrap")
    script = {
        "steps": [
            {
                "tool_calls": [
                    {
                        "name": "run_command",
                        "arguments": {"command": "touch ran", "description": "touch"},
                    }
                ]
            },
            {"text": "ok"},
        ]
    }
    with trio.fail_after(30), ModelServer(script) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        model_client.append(client)
        models = FixedModel(client, Config(sandbox="bwrap", sandbox_bwrap=missing))
        async with running_sessions(store, ws, server, models=models) as sessions:
            session = await sessions.create()
            sessions.start_turn(session, TurnRequest(text="go"))
            await sessions.wait_idle(session.id)
    (notice,) = [item for item in session.items() if isinstance(item, Notice)]
    assert (notice.code, notice.level) == ("sandbox", "error")
    assert notice.message.startswith("Commands will not run: the command sandbox is on")
    (call,) = [item for item in session.items() if isinstance(item, ToolCall)]
    assert call.status == "failed"
    assert "is not installed" in (call.output or "")
    assert not (ws / "ran").exists()


def test_the_settings_make_the_sandbox_and_hide_tether_s_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("CONFIG", "DATA", "STATE"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / name.lower()))
    config = parse_config(
        tmp_path / "config.toml",
        'sandbox = "bwrap"\nsandbox_network = true\nsandbox_bwrap = "/opt/bwrap"\n'
        f'sandbox_writable = ["{tmp_path}"]\nsandbox_allow_read = ["~/.aws", "{tmp_path}/config"]\n'
        'sandbox_hide = ["~/notes"]\n',
    )
    sandbox = command_sandbox(config, tmp_path)
    assert sandbox is not None
    assert (sandbox.program, sandbox.network, sandbox.writable) == (
        "/opt/bwrap",
        True,
        (tmp_path.resolve(),),
    )
    home = (tmp_path / "home").resolve()
    assert {home / ".ssh", home / "notes"} <= set(sandbox.hidden)
    assert home / ".aws" not in sandbox.hidden
    assert home / ".aws" in sandbox.shown
    # tether's own folders stay hidden, whatever the user shows; its skills stay readable.
    tether = [(tmp_path / name / "tether").resolve() for name in ("config", "data", "state")]
    assert set(tether) <= set(sandbox.private)
    assert (tmp_path / "config/tether/skills").resolve() in sandbox.shown
    assert command_sandbox(Config(), tmp_path) is None


def test_a_relative_path_to_hide_or_show_is_a_clear_error(tmp_path: Path) -> None:
    for setting in ("sandbox_allow_read", "sandbox_hide"):
        with pytest.raises(ConfigError) as raised:
            parse_config(tmp_path / "config.toml", f'{setting} = ["secrets/key"]\n')
        assert str(raised.value) == (
            f"{tmp_path}/config.toml: {setting}: 'secrets/key' is a relative path; write it "
            "absolute (/...) or from your home (~/...)"
        )


def test_variables_naming_a_hidden_socket_or_display_are_left_out(tmp_path: Path) -> None:
    env = {
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
        "DISPLAY": ":0",
        "WAYLAND_DISPLAY": "wayland-0",
        "XAUTHORITY": "/run/user/1000/xauth",
        "DOCKER_HOST": "unix:///run/docker.sock",
        "PATH": "/usr/bin",
        "TMPDIR": "/var/tmp",
    }
    assert Sandbox(workspace=tmp_path).env(env) == {"PATH": "/usr/bin", "TMPDIR": "/tmp"}
    # One that names a place the user shows again is kept.
    shown = Sandbox(workspace=tmp_path, shown=(Path("/tmp/ssh-x"), Path("/tmp/.X11-unix")))
    assert shown.env(env) == {
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "DISPLAY": ":0",
        "PATH": "/usr/bin",
        "TMPDIR": "/tmp",
    }


@pytest.fixture
def fake_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home outside /tmp (the sandbox's /tmp is empty anyway, so a home there would prove
    nothing), with tether's folders in it."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        home = Path(folder).resolve()
        monkeypatch.setenv("HOME", str(home))
        for name, default in (("CONFIG", ".config"), ("DATA", ".local/share")):
            monkeypatch.setenv(f"XDG_{name}_HOME", str(home / default))
        monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local/state"))
        yield home


async def test_credentials_are_hidden_unless_allowed_and_the_user_hides_more(
    ws: Path, fake_home: Path
) -> None:
    files = {
        ".ssh/id_ed25519": "PRIVATE KEY",
        ".aws/credentials": "aws_secret_access_key = x",
        ".netrc": "machine example.com password x",
        "notes/private.txt": "mine",
        "notes/public.txt": "anyone's",
        ".config/tether/config.toml": 'api_key = "sk-x"',
        ".config/tether/skills/lint/run.sh": "echo lint",
    }
    for name, text in files.items():
        (fake_home / name).parent.mkdir(parents=True, exist_ok=True)
        (fake_home / name).write_text(text + "\n")
    config = Config(
        sandbox="bwrap",
        sandbox_allow_read=["~/.aws", "~/.config/tether"],
        sandbox_hide=["~/notes/private.txt"],
    )
    sandbox = command_sandbox(config, ws)
    assert sandbox is not None
    command = "; ".join(f"cat ~/{name} 2>/dev/null || echo '{name} hidden'" for name in files)
    result = await run(ToolContext(ws, sandbox=sandbox), command)
    assert result.output.splitlines()[1:] == [
        ".ssh/id_ed25519 hidden",
        "aws_secret_access_key = x",
        ".netrc hidden",
        "notes/private.txt hidden",
        "anyone's",
        ".config/tether/config.toml hidden",  # allowed or not: tether's own
        "echo lint",
    ]


async def test_a_hidden_folder_is_empty_in_the_sandbox(ws: Path) -> None:
    """The runtime dir is hidden so: its discovery files hold the daemon's token."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        (Path(folder) / "discovery.json").write_text('{"token": "secret"}')
        sandbox = Sandbox(workspace=ws, hidden=(Path(folder),))
        result = await run(ToolContext(ws, sandbox=sandbox), f"ls -A {folder}; echo listed")
        assert result.output.splitlines()[1:] == ["listed"]
        assert (Path(folder) / "discovery.json").exists()


async def test_daemon_status_says_when_sandboxed_commands_cannot_run(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    bwrap = require_program("bwrap", WHY)
    async with pooled_rig(tmp_path, sqlite_store, model_server, {}) as p:
        client = await p.rig.client()
        off = await client.call("daemon/status")
        assert isinstance(off, DaemonStatusResult)
        assert (off.sandbox, off.sandbox_problem) == ("off", "")
        p.write("", f'sandbox = "bwrap"\nsandbox_bwrap = "{tmp_path}/no-such-bwrap"\n')
        broken = await client.call("daemon/status")
        assert isinstance(broken, DaemonStatusResult)
        assert (broken.sandbox, broken.sandbox_network) == ("bwrap", False)
        assert "is not installed, so commands do not run" in broken.sandbox_problem
        lines = status_lines(broken, 1234)
        assert "  sandbox   bwrap, no network" in lines
        assert f"  commands do not run: {broken.sandbox_problem}" in lines
        p.write("", f'sandbox = "bwrap"\nsandbox_bwrap = "{bwrap}"\nsandbox_network = true\n')
        fixed = await client.call("daemon/status")
        assert isinstance(fixed, DaemonStatusResult)
        assert (fixed.sandbox_network, fixed.sandbox_problem) == (True, "")
        assert "  sandbox   bwrap, network allowed" in status_lines(fixed, 1234)


async def test_a_background_process_that_needed_the_network_is_told_how_to_allow_it(
    ws: Path, listener: socket.socket
) -> None:
    table = ProcessTable(grace=GRACE)
    ctx = ToolContext(ws, sandbox=Sandbox(workspace=ws), services={"processes": table})
    tools = registry()
    params = tools.validate("command_output", '{"id": "p1"}')
    assert not isinstance(params, str)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            await run(ctx, connect(listener), background=True)
            await table.get("p1").done.wait()
            read = await tools.run("command_output", params, ctx)
            nursery.cancel_scope.cancel()
    assert read.output.startswith("[p1 exited with code 1:")
    assert read.output.rstrip().endswith(
        "set sandbox_network = true in config.toml (the user's own settings; a workspace cannot).)"
    )


async def test_tether_s_own_folders_are_hidden_in_a_workspace_that_holds_them(
    ws: Path,
) -> None:
    settings = ws / "home/.config/tether"
    settings.mkdir(parents=True)
    (settings / "config.toml").write_text('sandbox = "bwrap"\n')
    sandbox = Sandbox(workspace=ws, private=(settings,))
    command = (
        "ls -A home/.config/tether; echo 'sandbox = \"off\"' > home/.config/tether/config.toml;"
        " touch home/other"
    )
    result = await run(ToolContext(ws, sandbox=sandbox), command)
    assert result.output.splitlines()[1:] == ["(no output)"]  # empty; the write went nowhere
    assert (settings / "config.toml").read_text() == 'sandbox = "bwrap"\n'
    assert (ws / "home/other").exists()


async def test_a_sandboxed_command_reads_the_stdin_it_is_given(ws: Path) -> None:
    with trio.fail_after(20):
        done = await run_to_completion(
            "cat",
            cwd=ws,
            env=command_env(),
            time_limit=10,
            on_output=lambda _text: None,
            head=100,
            tail=100,
            sandbox=Sandbox(workspace=ws),
            stdin=b"from the daemon",
        )
    assert (done.exit_code, done.output.render(100, 100)) == (0, "from the daemon")


async def test_a_workspace_inside_a_hidden_folder_is_still_there_and_writable(
    fake_home: Path,
) -> None:
    require_program("bwrap", WHY)
    project = fake_home / ".config/project"
    project.mkdir(parents=True)
    (project / "README").write_text("mine\n")
    (fake_home / ".config/secret").write_text("key\n")
    sandbox = Sandbox(workspace=project, hidden=(fake_home / ".config",))
    command = "cat README; cat ../secret 2>/dev/null || echo 'secret hidden'; touch made"
    result = await run(ToolContext(project, sandbox=sandbox), command)
    assert result.output.splitlines()[1:] == ["mine", "secret hidden"]
    assert (project / "made").exists()
