"""run_command, command_output and command_kill with real subprocesses: output, exit codes,
the environment, limits, streaming, and process trees that are stopped completely."""

import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.support import alive, group_survivors, require_program, tagged
from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.procs.table import ProcessTable
from tether.daemon.tools import run_command
from tether.daemon.tools.base import ToolContext, ToolOutput
from tether.daemon.tools.command_kill import CommandKill
from tether.daemon.tools.command_output import CommandOutput
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.run_command import RunCommand, RunCommandParams
from tether.daemon.truncate import cut_marker

GRACE = 0.2
REGISTRY = ToolRegistry([RunCommand(grace=GRACE), CommandOutput(), CommandKill()])


async def call(ctx: ToolContext, tool: str, **args: object) -> ToolResult:
    params = REGISTRY.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(30):
        return await REGISTRY.run(tool, params, ctx)


async def run(ctx: ToolContext, command: str, **args: object) -> str:
    result = await call(ctx, "run_command", command=command, description="test", **args)
    assert result.status == "completed", result.output
    return result.output


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture(params=["unconfined", "sandboxed"])
def sandbox(request: pytest.FixtureRequest, ws: Path) -> Sandbox | None:
    """Each test that takes it runs twice: as it is, and in the command sandbox (bubblewrap).
    In the sandbox the pids a command prints are its pid namespace's: such a test finds the
    tree by the MARK variable its commands get (`marked`)."""
    if request.param == "unconfined":
        return None
    require_program("bwrap", "the command sandbox runs commands under bubblewrap")
    return Sandbox(workspace=ws.resolve())


@pytest.fixture
def marker() -> str:
    return uuid.uuid4().hex


def marked(marker: str) -> RunCommand:
    """run_command whose commands carry `MARK=marker` (see `tests.support.tagged`)."""
    return RunCommand(env={**os.environ, "MARK": marker}, grace=GRACE)


async def run_marked(ctx: ToolContext, marker: str, command: str, **args: object) -> str:
    tools = ToolRegistry([marked(marker)])
    params = tools.validate(
        "run_command", json.dumps({"command": command, "description": "test", **args})
    )
    assert not isinstance(params, str), params
    with trio.fail_after(30):
        result = await tools.run("run_command", params, ctx)
    assert result.status == "completed", result.output
    return result.output


async def test_output_exit_code_and_duration(ws: Path) -> None:
    out = await run(ToolContext(ws), "echo out; echo err >&2; sleep 0.3; exit 3")
    header, body = out.split("\n", 1)
    match = re.fullmatch(r"exit code 3 · (\d+\.\d) s", header)
    assert match is not None, header
    assert float(match.group(1)) >= 0.3
    assert body == "out\nerr"


async def test_runs_in_cwd_inside_the_workspace(ws: Path) -> None:
    (ws / "sub").mkdir()
    out = await run(ToolContext(ws), "pwd", cwd="sub")
    assert out.split("\n")[1] == str((ws / "sub").resolve())
    missing = await call(ToolContext(ws), "run_command", command="pwd", description="x", cwd="no")
    assert missing.status == "failed"


async def test_stdin_is_dev_null(ws: Path) -> None:
    out = await run(ToolContext(ws), "readlink /proc/self/fd/0; cat; echo after-cat")
    assert out.split("\n")[1:] == ["/dev/null", "after-cat"]


async def test_ansi_codes_are_stripped(ws: Path) -> None:
    out = await run(ToolContext(ws), r"printf '\033[1;31mred\033[0m plain \033]0;title\007end\n'")
    assert out.split("\n")[1] == "red plain end"


async def test_secret_looking_variables_are_removed_and_quiet_ones_set(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "FOO_TOKEN": "t1",
        "MY_SECRET_VALUE": "s1",
        "DB_PASSWORD": "p1",
        "OPENAI_API_KEY": "k1",
        "SIGNING_KEY": "k2",
        "AWS_ACCESS_KEY_ID": "k3",
        "GITHUB_PAT": "k4",
    }
    kept = {"MONKEY": "banana", "KEYBOARD_LAYOUT": "us", "PLAIN_SETTING": "yes"}
    for name, value in {**secrets, **kept}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NO_COLOR", "0")
    out = await run(ToolContext(ws), "env")
    env = dict(line.split("=", 1) for line in out.split("\n")[1:] if "=" in line)
    for name in secrets:
        assert name not in env, name
    for name, value in kept.items():
        assert env[name] == value
    assert env["NO_COLOR"] == "1"
    assert env["GIT_PAGER"] == "cat"
    assert env["GIT_TERMINAL_PROMPT"] == "0"


async def test_long_output_keeps_the_first_6000_and_last_14000_characters(ws: Path) -> None:
    command = r"printf HEAD; head -c 50000 /dev/zero | tr '\0' x; printf TAIL"
    roomy = ToolContext(ws, result_cap=100_000)
    body = (await run(roomy, command)).split("\n", 1)[1]
    assert body == "HEAD" + "x" * 5996 + cut_marker(30_008) + "x" * 13_996 + "TAIL"
    # With the default 20,000-character cap the whole result still fits: no second cut.
    out = await run(ToolContext(ws), command)
    assert len(out) <= 20_000
    body = out.split("\n", 1)[1]
    assert body.startswith("HEAD" + "x" * 5996 + "\n\n[…")
    assert body.endswith("x" * 13_000 + "TAIL")
    assert body.count("characters cut here") == 1


async def test_output_streams_before_the_command_ends(ws: Path) -> None:
    # The command goes on only once its first line has reached the client, which lets it go
    # on: output held back until the end would never get there (`call` fails after 30 s).
    chunks: list[str] = []

    def on_output(text: str) -> None:
        chunks.append(text)
        if "first" in text:
            (ws / "go").touch()

    command = "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second"
    out = await run(ToolContext(ws, output=on_output), command)
    assert out.split("\n")[1:] == ["first", "second"]
    assert "".join(chunks) == "first\nsecond\n"


async def test_live_output_to_clients_is_bounded(ws: Path) -> None:
    chunks: list[str] = []
    ctx = ToolContext(ws, output=chunks.append)
    params = RunCommandParams(command="head -c 1000 /dev/zero | tr '\\0' z", description="z")
    with trio.fail_after(30):
        out = await RunCommand(grace=GRACE, stream_limit=100).run(params, ctx)
    streamed = "".join(chunks)
    assert streamed.startswith("z" * 100 + "\n[… live output stops here")
    assert streamed.count("z") == 100
    assert isinstance(out, ToolOutput)
    assert out.text.split("\n")[1] == "z" * 1000  # the model still gets all of it


async def test_timeout_stops_the_whole_tree(ws: Path, sandbox: Sandbox | None, marker: str) -> None:
    command = 'trap \'\' TERM; sleep 300 & echo "pid $!"; echo "leader $$"; wait'
    ctx = ToolContext(ws, sandbox=sandbox)
    out = await run_marked(ctx, marker, command, timeout_seconds=1)
    assert out.startswith("Timed out after 1 s: the command and every process it started")
    pids = [int(p) for p in re.findall(r"pid (\d+)", out)]
    leader = int(re.findall(r"leader (\d+)", out)[0])
    assert pids
    assert tagged(marker) == []
    if sandbox is None:
        assert not any(alive(pid) for pid in [*pids, leader])
        assert group_survivors(leader) == []


async def test_processes_left_running_are_stopped_when_the_shell_exits(
    ws: Path, sandbox: Sandbox | None, marker: str
) -> None:
    out = await run_marked(ToolContext(ws, sandbox=sandbox), marker, 'sleep 300 & echo "pid $!"')
    assert re.findall(r"pid (\d+)", out)
    assert tagged(marker) == []
    if sandbox is None:
        # In the sandbox the kernel ends them with its pid namespace, before they are counted.
        assert "1 process it left running was stopped" in out
        assert "background: true" in out


TREE = (
    "trap '' TERM\n"
    'sleep 300 & echo "pid $!"\n'
    'sh -c \'sleep 300 & echo "pid $!"; sleep 300 & echo "pid $!"; wait\' & echo "pid $!"\n'
    'echo "leader $$"\n'
    "wait\n"
)


async def test_cancel_kills_children_and_grandchildren_that_ignore_sigterm(
    ws: Path, sandbox: Sandbox | None, marker: str
) -> None:
    seen: list[str] = []
    ready = trio.Event()

    def on_output(text: str) -> None:
        seen.append(text)
        joined = "".join(seen)
        if joined.count("pid ") == 4 and "leader" in joined:
            ready.set()

    ctx = ToolContext(ws, output=on_output, sandbox=sandbox)
    tool = marked(marker)
    params = RunCommandParams(command=TREE, description="tree")
    outcome: list[object] = []

    async def go() -> None:
        outcome.append(await tool.run(params, ctx))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(go)
            await ready.wait()
            joined = "".join(seen)
            pids = [int(p) for p in re.findall(r"pid (\d+)", joined)]
            leader = int(re.findall(r"leader (\d+)", joined)[0])
            # The shell, sh -c and three sleeps (and, in the sandbox, bwrap and its pid 1).
            assert len(tagged(marker)) == (5 if sandbox is None else 7)
            if sandbox is None:
                assert all(alive(pid) for pid in pids)
                assert len(group_survivors(leader)) == 5
            nursery.cancel_scope.cancel()
    assert outcome == []  # cancelled, not completed
    # They ignored SIGTERM, so only the SIGKILL after the grace period could stop them (that
    # the grace is given is tests/unit/test_procs.py's).
    assert tagged(marker) == []
    if sandbox is None:
        assert not any(alive(pid) for pid in [*pids, leader])
        assert group_survivors(leader) == []


# --- background processes ---------------------------------------------------------------------


@pytest.fixture
async def table() -> AsyncIterator[ProcessTable]:
    table = ProcessTable(grace=GRACE)
    async with trio.open_nursery() as nursery:
        await nursery.start(table.serve)
        yield table
        nursery.cancel_scope.cancel()


async def wait_for_output(ctx: ToolContext, process_id: str, needle: str) -> str:
    collected = ""
    with trio.fail_after(10):
        while needle not in collected:
            result = await call(ctx, "command_output", id=process_id)
            assert result.status == "completed", result.output
            collected += result.output.split("\n", 1)[1].removeprefix("(no new output)")
            # command_output answers at once with what a real process printed so far: asking
            # again, as the model does, is the way to read what it prints next.
            await trio.sleep(0.05)
    return collected


async def test_background_process_outlives_the_call_and_is_read_incrementally(
    ws: Path, table: ProcessTable, sandbox: Sandbox | None
) -> None:
    ctx = ToolContext(ws, session_id="s1", services={"processes": table}, sandbox=sandbox)
    # It goes on past "one" only once the test has read that.
    script = "echo one; while [ ! -e go ]; do sleep 0.01; done; echo two; echo three; sleep 300"
    started = await run(ctx, script, background=True)
    assert started.startswith("Started background process p1 (pid ")
    assert ("in the sandbox" in started) == (sandbox is not None)
    assert "command_output(id='p1')" in started
    [info] = table.list()
    assert info.id == "p1"
    assert info.status == "running"
    assert info.session_id == "s1"
    assert info.command == script
    assert alive(info.pid)

    first = await wait_for_output(ctx, "p1", "one")
    assert first.split() == ["one"]
    (ws / "go").touch()
    rest = await wait_for_output(ctx, "p1", "three")
    assert "one" not in rest
    assert rest.replace("\n", " ").split() == ["two", "three"]
    status = await call(ctx, "command_output", id="p1")
    assert status.output.startswith("[p1 running for ")
    assert status.output.endswith("(no new output)")

    killed = await call(ctx, "command_kill", id="p1")
    assert killed.status == "completed"
    assert killed.output.startswith("[p1 was stopped:")
    assert not alive(info.pid)
    assert group_survivors(info.pid) == []
    assert table.list()[0].status == "killed"


async def test_background_process_that_exits_reports_its_code(
    ws: Path, table: ProcessTable, sandbox: Sandbox | None
) -> None:
    ctx = ToolContext(ws, services={"processes": table}, sandbox=sandbox)
    await run(ctx, "echo done; exit 4", background=True)
    with trio.fail_after(10):
        await table.get("p1").done.wait()
    out = (await call(ctx, "command_output", id="p1")).output
    assert out.split("\n") == ["[p1 exited with code 4: echo done; exit 4]", "done", ""]
    [info] = table.list()
    assert (info.status, info.exit_code) == ("exited", 4)


async def test_unknown_process_ids_and_a_missing_table(ws: Path, table: ProcessTable) -> None:
    ctx = ToolContext(ws, services={"processes": table})
    for tool in ("command_output", "command_kill"):
        result = await call(ctx, tool, id="p99")
        assert result.status == "failed"
        assert "no background process 'p99'" in result.output
    bare = ToolContext(ws)
    result = await call(bare, "run_command", command="sleep 1", description="x", background=True)
    assert result.status == "failed"
    assert "not available" in result.output


async def test_command_tools_state_their_command_line() -> None:
    params = RunCommandParams(command="make test", description="run the tests")
    assert RunCommand().command_line(params) == "make test"


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    assert match is not None
    return int(match.group(1))


def _reset_peak_rss() -> None:
    """Reset VmHWM, so that it measures what runs from now on."""
    Path("/proc/self/clear_refs").write_text("5")


async def test_a_100_mb_output_stays_bounded_in_the_result_the_stream_and_memory(
    ws: Path,
) -> None:
    chunks: list[str] = []
    ctx = ToolContext(ws, result_cap=100_000, output=chunks.append)
    _reset_peak_rss()
    before = _status_kib("VmRSS")
    out = await run(ctx, "printf HEAD; yes | head -c 100000000; printf TAIL")
    peak = _status_kib("VmHWM")
    header, body = out.split("\n", 1)
    assert header.startswith("exit code 0")
    total = 4 + 100_000_000 + 4
    assert body == ("HEAD" + "y\n" * 2998 + cut_marker(total - 20_000) + "y\n" * 6998 + "TAIL")
    streamed = "".join(chunks)
    assert streamed.startswith("HEADy\ny\n")
    assert streamed.endswith("\n[… live output stops here; the command is still running …]\n")
    assert len(streamed) < run_command.STREAM_LIMIT + 100
    # Neither the output nor a large part of it was held at once.
    assert peak - before < 40_000, f"the peak RSS grew by {(peak - before) // 1024} MiB"


async def test_live_output_is_gathered_into_a_few_deltas(ws: Path) -> None:
    calls: list[str] = []
    script = "import sys, time\nfor i in range(300):\n    print(i, flush=True); time.sleep(0.002)"
    (ws / "trickle.py").write_text(script)
    out = await run(ToolContext(ws, output=calls.append), f"{sys.executable} trickle.py")
    lines = [str(i) for i in range(300)]
    assert out.split("\n")[1:] == lines
    assert "".join(calls) == "".join(f"{line}\n" for line in lines)
    # 300 lines over at least 0.6 s, passed on at most every 50 ms.
    assert len(calls) < 100, len(calls)
