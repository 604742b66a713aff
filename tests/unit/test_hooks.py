"""Hooks in a turn, in-process: the real sessions over a real store, the scripted model over
real HTTP, hooks as real shell scripts run as the daemon's processes. A pre_tool hook that
denies (the command never runs, the model reads the reason) or allows, a hook whose rule does
not match, post_tool output in the result, turn_end, session_start, approval_requested and
turn_waiting with their JSON, hooks that time out or crash, and a workspace's hooks, which are
never read."""

import json
import re
import stat
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.inprocess import Watcher, running_sessions
from tether.daemon.config.hooks import HookConfig
from tether.daemon.config.settings import Config, ConfigError, parse_config
from tether.daemon.hooks.events import TurnEndHookInput
from tether.daemon.hooks.run import HookRun
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.events import ApprovalRequest, ApprovalRequested
from tether.protocol.items import AgentMessage, Notice, ToolCall
from tether.testing import ModelServer

JSON = dict[str, Any]


class Places:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.workspace = tmp_path / "project"
        self.workspace.mkdir()
        self.scripts = tmp_path / "hooks"
        self.scripts.mkdir()
        self.store = Store(tmp_path / "tether.sqlite3")

    def script(self, name: str, body: str) -> str:
        """A shell script of the user's, outside the workspace; returns the command."""
        path = self.scripts / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return str(path)

    def seen(self, name: str) -> list[JSON]:
        """The JSON objects a recording hook wrote to `name` (one a line)."""
        path = self.root / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def recorder(self, name: str, then: str = "exit 0") -> str:
        """A hook that appends its stdin (one JSON object) as a line of `name`, then `then`."""
        return self.script(
            f"{name}.sh", f'cat >> "{self.root / name}"\necho >> "{self.root / name}"\n{then}\n'
        )


@pytest.fixture
def places(tmp_path: Path) -> Iterator[Places]:
    found = Places(tmp_path)
    found.store.open()
    yield found
    found.store.close()


@asynccontextmanager
async def hooked_sessions(
    places: Places, server: ModelServer, hooks: list[HookConfig]
) -> AsyncGenerator[Sessions]:
    client = OpenAIChatClient(base_url=server.base_url, model="scripted")
    models = FixedModel(client, Config(hooks=hooks))
    try:
        async with running_sessions(
            places.store, places.workspace, server, models=models
        ) as sessions:
            yield sessions
    finally:
        await client.aclose()


def command(text: str) -> JSON:
    return {
        "tool_calls": [
            {"name": "run_command", "arguments": {"command": text, "description": "a command"}}
        ]
    }


async def turn(sessions: Sessions, session: Session, text: str = "go") -> None:
    sessions.start_turn(session, TurnRequest(text=text))
    await sessions.wait_idle(session.id)


def tool_results(request: JSON) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def notices(session: Session) -> list[Notice]:
    return [item for item in session.items() if isinstance(item, Notice)]


def calls(session: Session) -> list[ToolCall]:
    return [item for item in session.items() if isinstance(item, ToolCall)]


def last_status(session: Session) -> str:
    return session.turns[-1].status


async def test_a_pre_tool_hook_denies_a_matching_command_and_the_model_reads_why(
    places: Places,
) -> None:
    deny = places.recorder("pre.jsonl", "echo 'pushing is for humans'\nexit 2")
    hooks = [
        HookConfig(event="pre_tool", command=deny, match=["run_command(touch *)"], name="guard")
    ]
    script = {"steps": [command("touch ran.txt"), {"text": "ok"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create(permission_mode="auto")
            await turn(sessions, session)
    assert not (places.workspace / "ran.txt").exists()
    (result,) = tool_results(server.requests[-1])
    assert "`guard`" in result
    assert "pushing is for humans" in result
    (call,) = calls(session)
    assert call.status == "failed"
    assert call.output == result
    (notice,) = notices(session)
    assert notice.code == "hook_denied"
    assert "run_command(touch ran.txt)" in notice.message
    assert "pushing is for humans" in notice.message
    (seen,) = places.seen("pre.jsonl")
    assert seen == {
        "event": "pre_tool",
        "hook": "guard",
        "session_id": session.id,
        "turn_id": session.turns[-1].id,
        "workspace": str(places.workspace),
        "item_id": call.id,
        "tool": "run_command",
        "arguments": {"command": "touch ran.txt", "description": "a command"},
        "command": "touch ran.txt",
        "path": "",
        "subagent": "",
    }
    assert last_status(session) == "completed"


async def test_a_pre_tool_hook_that_exits_0_lets_the_call_run(places: Places) -> None:
    allow = places.recorder("pre.jsonl")
    hooks = [HookConfig(event="pre_tool", command=allow, match=["run_command(touch *)"])]
    script = {"steps": [command("touch ran.txt"), {"text": "ok"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create(permission_mode="auto")
            await turn(sessions, session)
    assert (places.workspace / "ran.txt").exists()
    assert [seen["command"] for seen in places.seen("pre.jsonl")] == ["touch ran.txt"]
    assert calls(session)[0].status == "completed"
    assert notices(session) == []


async def test_a_hook_whose_rule_does_not_match_is_not_run_and_changes_nothing(
    places: Places,
) -> None:
    """A hook for `git push` stays out of a `touch`: it never runs, and the model is sent
    byte for byte what it is sent with no hooks at all."""
    watch = places.recorder("push.jsonl", "echo never\nexit 2")
    hooks = [
        HookConfig(event="pre_tool", command=watch, match=["run_command(git push *)"]),
        HookConfig(event="post_tool", command=watch, match=["run_command(git push *)"]),
    ]
    sent: list[list[JSON]] = []
    for configured in ([], hooks):
        (places.workspace / "ran.txt").unlink(missing_ok=True)
        script = {"steps": [command("touch ran.txt"), {"text": "ok"}]}
        with trio.fail_after(20), ModelServer(script) as server:
            async with hooked_sessions(places, server, configured) as sessions:
                session = await sessions.create(permission_mode="auto")
                await turn(sessions, session)
        sent.append([_without_durations(request) for request in server.requests])
        assert (places.workspace / "ran.txt").exists()
    assert places.seen("push.jsonl") == []
    assert sent[0] == sent[1]


def _without_durations(request: JSON) -> JSON:
    """`request` with a command's duration (`exit 0 · 0.1 s`, which a loaded machine changes)
    taken out of its results."""
    text = json.dumps(request, ensure_ascii=False)
    return json.loads(re.sub(r" · \d+\.\d s", " · N s", text))


async def test_post_tool_output_joins_the_result_the_model_sees(places: Places) -> None:
    lint = places.recorder("post.jsonl", "echo 'lint: 2 warnings in ran.txt'")
    quiet = places.recorder("quiet.jsonl")
    hooks = [
        HookConfig(event="post_tool", command=lint, match=["run_command"], name="lint"),
        HookConfig(event="post_tool", command=quiet, match=["read_file"]),
    ]
    script = {"steps": [command("echo made"), {"text": "ok"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create(permission_mode="auto")
            await turn(sessions, session)
    (result,) = tool_results(server.requests[-1])
    assert "made" in result.split("[post_tool hook")[0]
    assert result.endswith("[post_tool hook `lint`]\nlint: 2 warnings in ran.txt")
    assert calls(session)[0].output == result  # clients see what the model sees
    (seen,) = places.seen("post.jsonl")
    assert seen["event"] == "post_tool"
    assert seen["command"] == "echo made"
    assert seen["result"]["status"] == "completed"
    assert seen["result"]["exit_code"] == 0
    assert "made" in seen["result"]["output"]
    assert "lint:" not in seen["result"]["output"]
    assert places.seen("quiet.jsonl") == []


async def test_session_start_runs_at_the_first_turn_and_turn_end_at_every_end(
    places: Places,
) -> None:
    hooks = [
        HookConfig(event="session_start", command=places.recorder("start.jsonl")),
        HookConfig(event="turn_end", command=places.recorder("end.jsonl")),
    ]
    script = {"steps": [{"text": "one"}, {"text": "two"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
            await turn(sessions, session)
    first, second = (turn.id for turn in session.turns)
    base = {"session_id": session.id, "workspace": str(places.workspace)}
    assert places.seen("start.jsonl") == [
        {"event": "session_start", "hook": hooks[0].command, "turn_id": first, **base}
    ]
    assert places.seen("end.jsonl") == [
        {"event": "turn_end", "hook": hooks[1].command, "turn_id": turn_id, "status": "completed"}
        | base
        for turn_id in (first, second)
    ]
    assert notices(session) == []


async def test_a_call_that_asks_runs_approval_requested_and_the_turn_waiting_hooks(
    places: Places,
) -> None:
    hooks = [
        HookConfig(
            event="approval_requested",
            command=places.recorder("asked.jsonl"),
            match=["run_command(echo *)"],
            name="asked",
        ),
        HookConfig(event="turn_waiting", command=places.recorder("waiting.jsonl")),
    ]
    script = {"steps": [command("echo one"), command("ls"), {"text": "done"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create()  # mode `edits`: commands ask
            watcher = Watcher()
            session.attach(watcher, "observer", None)
            sessions.start_turn(session, TurnRequest(text="go"))
            requests: list[ApprovalRequest] = []
            for _ in range(2):
                event = await watcher.wait_for(
                    lambda e: isinstance(e, ApprovalRequested) and e.approval not in requests
                )
                assert isinstance(event, ApprovalRequested)
                requests.append(event.approval)
                broker = await sessions.broker(session.id)
                broker.respond(event.approval.id, decision="allow", scope="once", by="test")
            await sessions.wait_idle(session.id)
    assert last_status(session) == "completed"
    echo, _ls = requests
    (turn_id,) = (turn.id for turn in session.turns)
    base = {"session_id": session.id, "turn_id": turn_id, "workspace": str(places.workspace)}
    assert places.seen("asked.jsonl") == [
        {
            "event": "approval_requested",
            "hook": "asked",
            **base,
            "item_id": echo.item_id,
            "tool": "run_command",
            "arguments": {"command": "echo one", "description": "a command"},
            "command": "echo one",
            "path": "",
            "subagent": "",
            "approval_id": echo.id,
            "kind": "command",
            "reason": echo.reason,
        }
    ]
    assert places.seen("waiting.jsonl") == [
        {
            "event": "turn_waiting",
            "hook": hooks[1].command,
            **base,
            "waiting_for": "approval",
            "approval_id": request.id,
        }
        for request in requests
    ]
    assert notices(session) == []


async def test_a_hook_that_times_out_or_crashes_is_a_notice_and_the_turn_goes_on(
    places: Places,
) -> None:
    slow = places.script("slow.sh", "exec sleep 30\n")
    crash = places.script("crash.sh", "echo 'Traceback: boom'\nexit 1\n")
    killed = places.script("killed.sh", "kill -9 $$\n")
    hooks = [
        HookConfig(event="pre_tool", command=slow, timeout=0.3, name="slow"),
        HookConfig(event="pre_tool", command=crash, name="crash"),
        HookConfig(event="post_tool", command=killed, name="killed"),
        HookConfig(event="turn_end", command=places.script("missing.sh", "exec /nonexistent\n")),
    ]
    script = {"steps": [command("touch ran.txt"), {"text": "still here"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create(permission_mode="auto")
            await turn(sessions, session)
    assert (places.workspace / "ran.txt").exists()
    assert last_status(session) == "completed"
    assert [i.text for i in session.items() if isinstance(i, AgentMessage)] == ["still here"]
    found = [(n.code, n.message) for n in notices(session)]
    assert [code for code, _ in found] == ["hook_failed"] * 4
    slow_notice, crash_notice, killed_notice, end_notice = (message for _, message in found)
    assert "`slow` (for run_command) timed out after 0.3 s" in slow_notice
    assert "the call went ahead" in slow_notice
    assert "`crash` (for run_command) exited 1: Traceback: boom" in crash_notice
    assert "killed by signal 9" in killed_notice
    assert "the result is unchanged" in killed_notice
    assert "exited 127" in end_notice
    assert "[post_tool" not in tool_results(server.requests[-1])[0]


@pytest.mark.parametrize(
    ("exit_code", "reads"),
    [
        (-9, "was killed by signal 9"),
        (137, "exited 137 (killed by signal 9)"),
        (143, "exited 143 (killed by signal 15)"),
        (2, "exited 2"),
        (200, "exited 200"),
    ],
)
def test_a_signal_reads_the_same_whether_the_shell_exec_ed_the_hook_or_waited_for_it(
    exit_code: int, reads: str
) -> None:
    assert HookRun(exit_code=exit_code, output="").failure(5.0) == reads


async def test_hooks_in_the_workspace_config_are_never_run(places: Places) -> None:
    """A repository's `.tether/config.toml` cannot add a hook: it is not run, and the turn
    says the setting was ignored."""
    marker = places.root / "workspace-hook-ran"
    (places.workspace / ".tether").mkdir()
    (places.workspace / ".tether/config.toml").write_text(
        f'[[hooks]]\nevent = "pre_tool"\ncommand = "touch {marker}"\n'
        f'[[hooks]]\nevent = "turn_end"\ncommand = "touch {marker}"\n'
    )
    script = {"steps": [command("touch ran.txt"), {"text": "ok"}]}
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, []) as sessions:
            session = await sessions.create(permission_mode="auto")
            await turn(sessions, session)
    assert (places.workspace / "ran.txt").exists()
    assert not marker.exists()
    (notice,) = notices(session)
    assert notice.code == "workspace_config"
    assert "hooks" in notice.message


def test_a_hook_table_is_checked_when_the_config_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    good = parse_config(
        path,
        '[[hooks]]\nevent = "pre_tool"\ncommand = "check"\nmatch = ["run_command(git push *)"]\n',
    )
    assert good.hooks == [
        HookConfig(event="pre_tool", command="check", match=["run_command(git push *)"])
    ]
    assert good.hooks[0].timeout == 10.0
    for text, problem in (
        ('[[hooks]]\nevent = "turn_end"\ncommand = "x"\nmatch = ["a"]\n', "`match` applies"),
        ('[[hooks]]\nevent = "pre_tool"\ncommand = "x"\ntimeout = 600\n', "hooks[0].timeout"),
        ('[[hooks]]\nevent = "before_tool"\ncommand = "x"\n', "hooks[0].event"),
        ('[[hooks]]\nevent = "pre_tool"\ncommand = ""\n', "hooks[0].command"),
        ('[[hooks]]\nevent = "pre_tool"\ncommand = "x"\nwhen = 1\n', "when"),
    ):
        with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
            parse_config(path, text)


def test_the_stdin_json_keeps_its_field_names() -> None:
    payload = TurnEndHookInput(
        event="turn_end", hook="h", session_id="s", turn_id="t", workspace="/w", status="failed"
    )
    assert msgspec.json.decode(msgspec.json.encode(payload)) == {
        "event": "turn_end",
        "hook": "h",
        "session_id": "s",
        "turn_id": "t",
        "workspace": "/w",
        "status": "failed",
    }


async def test_a_subagents_calls_run_the_hooks_and_name_the_subagent(places: Places) -> None:
    (places.workspace / "README.md").write_text("hello\n")
    hooks = [
        HookConfig(event="pre_tool", command=places.recorder("pre.jsonl"), match=["read_file"]),
        HookConfig(
            event="post_tool",
            command=places.recorder("post.jsonl", "echo checked"),
            match=["read_file"],
            name="check",
        ),
    ]
    task = {
        "name": "task",
        "arguments": {
            "description": "Read the readme",
            "prompt": "alpha: read README.md",
            "subagent_type": "explore",
        },
    }
    read = {"name": "read_file", "arguments": {"path": "README.md"}}
    script = {
        "steps": [
            {"match": "parent:", "tool_calls": [task]},
            {"match": "alpha:", "tool_calls": [read]},
            {"match": "alpha:", "text": "alpha report"},
            {"match": "parent:", "text": "done"},
        ]
    }
    with trio.fail_after(20), ModelServer(script) as server:
        async with hooked_sessions(places, server, hooks) as sessions:
            session = await sessions.create()
            await turn(sessions, session, "parent: go")
    (pre,) = places.seen("pre.jsonl")
    assert (pre["tool"], pre["path"], pre["subagent"]) == (
        "read_file",
        "README.md",
        "Read the readme",
    )
    (post,) = places.seen("post.jsonl")
    assert post["subagent"] == "Read the readme"
    assert "hello" in post["result"]["output"]
    alpha = [r for r in server.requests if "alpha:" in json.dumps(r["messages"][1:2])]
    assert tool_results(alpha[-1])[0].endswith("[post_tool hook `check`]\nchecked")
