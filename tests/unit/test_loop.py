"""The turn loop without sockets to clients: real HTTP to the scripted model server, real tools
over a temporary workspace, and a recording sink in place of the session."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
import trio

from tether.daemon.context.history import History
from tether.daemon.providers.base import (
    ModelError,
    ModelHTTPError,
    ModelRequest,
    ModelResponse,
    StreamCallbacks,
)
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.tools.base import ReadVersions, ToolContext, ToolKind, ToolParams
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.turn.loop import CANCELLED_RESULT, REPEAT_NOTE, TurnLoop
from tether.protocol.items import AgentMessage, AnyItem, Notice, ToolCall, UserMessage
from tether.protocol.session import QueuedInput
from tether.testing import ModelServer


class RecordingSink:
    def __init__(self) -> None:
        self.log: list[tuple[str, AnyItem | str]] = []
        self.queued: list[QueuedInput] = []
        self.todos: list[str] = []

    def item_started(self, item: AnyItem) -> None:
        self.log.append(("started", item))

    def item_delta(self, item_id: str, delta: str) -> None:
        self.log.append(("delta", delta))

    def item_completed(self, item: AnyItem) -> None:
        self.log.append(("completed", item))

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        self.log.append(("retry", f"{attempt}/{max_attempts} {delay:.2f} {reason}"))

    def open_todos(self) -> list[str]:
        return self.todos

    def take_queued(self) -> list[QueuedInput]:
        queued, self.queued = self.queued, []
        return queued

    def completed(self) -> list[AnyItem]:
        return [
            item for kind, item in self.log if kind == "completed" and not isinstance(item, str)
        ]


class SleepParams(ToolParams, frozen=True, kw_only=True):
    name: str


class SlowTool:
    """Logs when each call starts and ends, to observe scheduling. Between the two it lets
    every other task run; a call named in `meet` also waits until all of `meet` have started,
    which calls that never overlap would wait for forever."""

    name: ClassVar[str] = "slow_read"
    description: ClassVar[str] = "test tool"
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SleepParams
    log: ClassVar[list[str]] = []
    meet: ClassVar[set[str]] = set()
    all_met: ClassVar[trio.Event] = trio.Event()

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, SleepParams)
        self.log.append(f"start {params.name}")
        if params.name in self.meet:
            if self.meet <= {entry.split()[1] for entry in self.log}:
                self.all_met.set()
            await self.all_met.wait()
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        self.log.append(f"end {params.name}")
        return f"slept {params.name}"


class SlowWrite(SlowTool):
    name: ClassVar[str] = "slow_write"
    kind: ClassVar[ToolKind] = "edit"


class BlockingWrite:
    """An edit that runs until it is cancelled; `started` is set once it runs."""

    name: ClassVar[str] = "blocking_write"
    description: ClassVar[str] = "test tool"
    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]] = SleepParams

    def __init__(self) -> None:
        self.started = trio.Event()

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        self.started.set()
        await trio.sleep_forever()


@pytest.fixture
async def model() -> AsyncIterator[tuple[ModelServer, OpenAIChatClient]]:
    with ModelServer({"steps": [{"text": "unused"}]}) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        yield server, client
        await client.aclose()


def make_loop(
    client: OpenAIChatClient, workspace: Path, sink: RecordingSink, **kw: object
) -> TurnLoop:
    counter = iter(range(1, 10_000))
    history = History("system")
    history.add_user("go")
    tools = kw.pop("tools", None) or ToolRegistry(default_tools())
    assert isinstance(tools, ToolRegistry | NotedEdits)
    max_steps = kw.pop("max_steps", 60)
    assert isinstance(max_steps, int)
    versions = ReadVersions()  # one session's edit guard, as the daemon keeps it
    return TurnLoop(
        model=client,
        tools=tools,
        tool_context=lambda _item: ToolContext(workspace, versions=versions),
        history=history,
        sink=sink,
        new_id=lambda: f"i{next(counter)}",
        max_steps=max_steps,
    )


async def test_bad_calls_become_results_and_the_turn_goes_on(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {"name": "delete_everything", "arguments": {}},
                        {"name": "read_file", "arguments_raw": "{not json"},
                        {"name": "read_file", "arguments": {"offset": 2}},
                    ]
                },
                {"text": "recovered"},
            ]
        }
    )
    sink = RecordingSink()
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink).run()
    assert outcome.status == "completed"
    calls = sorted(
        (i for i in sink.completed() if isinstance(i, ToolCall)), key=lambda c: c.call_id
    )
    assert [c.status for c in calls] == ["failed", "failed", "failed"]
    assert "Available tools: read_file, list_dir" in calls[0].output
    assert "'{not json'" in calls[1].output
    assert "path" in calls[2].output
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [c.output for c in calls]


class Crash:
    """A tool with a bug: it raises something other than ToolFailure."""

    name: ClassVar[str] = "crash"
    description: ClassVar[str] = "test tool"
    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]] = SleepParams

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        raise RuntimeError("the tool has a bug")


async def test_a_tool_that_raises_is_a_result_and_the_turn_goes_on(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    calls = [
        {"name": "read_file", "arguments": {"path": "a/x.py"}},
        {"name": "write_file", "arguments": {"path": "a", "content": "x"}},
        {"name": "crash", "arguments": {"name": "c"}},
    ]
    server.set_script({"steps": [{"tool_calls": calls}, {"text": "recovered"}]})
    sink = RecordingSink()
    registry = ToolRegistry([*default_tools(), Crash()])
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink, tools=registry).run()
    assert outcome.status == "completed"
    done = [i for i in sink.completed() if isinstance(i, ToolCall)]
    assert [c.status for c in done] == ["failed", "failed", "failed"]
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "symlink loop at a" in results[0]
    assert "symlink loop at a" in results[1]
    assert "crash failed with an unexpected error (RuntimeError: the tool has a bug)" in results[2]
    assert [i.text for i in sink.completed() if isinstance(i, AgentMessage)] == ["recovered"]


async def test_read_only_calls_overlap_and_others_run_alone_in_order(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    calls = [
        {"name": "slow_read", "arguments": {"name": "r1"}},
        {"name": "slow_read", "arguments": {"name": "r2"}},
        {"name": "slow_write", "arguments": {"name": "w1"}},
        {"name": "slow_write", "arguments": {"name": "w2"}},
        {"name": "slow_read", "arguments": {"name": "r3"}},
    ]
    server.set_script({"steps": [{"tool_calls": calls}, {"text": "done"}]})
    SlowTool.log.clear()
    SlowTool.meet = {"r1", "r2"}  # r1 and r2 each finish only once both have started
    SlowTool.all_met = trio.Event()
    sink = RecordingSink()
    registry = ToolRegistry([SlowTool(), SlowWrite()])
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink, tools=registry).run()
    assert outcome.status == "completed"
    log = SlowTool.log
    assert sorted(log[:2]) == ["start r1", "start r2"], "consecutive reads should overlap"
    assert sorted(log[2:4]) == ["end r1", "end r2"]
    assert log[4:] == ["start w1", "end w1", "start w2", "end w2", "start r3", "end r3"]
    results = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == [f"slept {n}" for n in ("r1", "r2", "w1", "w2", "r3")]


async def test_step_budget_pauses_the_turn(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script(
        {"loop": True, "steps": [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}]}
    )
    sink = RecordingSink()
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink, max_steps=3).run()
    assert outcome.status == "paused"
    assert len(server.requests) == 3
    notices = [i for i in sink.completed() if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["step_budget"]


async def test_model_error_fails_with_a_notice(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script({"steps": [{"error": {"status": 401, "message": "bad key"}}]})
    sink = RecordingSink()
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink).run()
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "TETHER_API_KEY" in outcome.error.message
    assert "bad key" in outcome.error.message


async def test_queued_message_joins_at_the_next_step(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script({"steps": [{"text": "first answer"}, {"text": "second answer"}]})
    sink = RecordingSink()
    sink.queued.append(QueuedInput(input_id="q1", text="also this"))
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink).run()
    assert outcome.status == "completed"
    users = [i.text for i in sink.completed() if isinstance(i, UserMessage)]
    assert users == ["also this"]
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "also this"}


async def test_cancel_closes_open_calls_and_keeps_history_valid(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script(
        {"steps": [{"tool_calls": [{"name": "blocking_write", "arguments": {"name": "w"}}]}]}
    )
    sink = RecordingSink()
    blocking = BlockingWrite()
    loop = make_loop(client, tmp_path, sink, tools=ToolRegistry([blocking]))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.run)
            await blocking.started.wait()
            nursery.cancel_scope.cancel()
    calls = [i for i in sink.completed() if isinstance(i, ToolCall)]
    assert [(c.status, c.output) for c in calls] == [("cancelled", CANCELLED_RESULT)]
    last = loop.history.messages[-1]
    assert (last.role, last.tool_call_id, last.content) == ("tool", "call_0_0", CANCELLED_RESULT)


async def test_streamed_text_becomes_one_agent_message(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script({"steps": [{"text": "hello there friend", "chunks": 3}]})
    sink = RecordingSink()
    with trio.fail_after(10):
        await make_loop(client, tmp_path, sink).run()
    deltas = [d for kind, d in sink.log if kind == "delta"]
    assert len(deltas) == 3
    messages = [i for i in sink.completed() if isinstance(i, AgentMessage)]
    assert [m.text for m in messages] == ["hello there friend"]


class ScriptedClient:
    """A model client over the loop's seam, for timing rules under trio's virtual clock."""

    model = "fake"
    provider = "fake"

    def __init__(self, outcomes: list[ModelResponse | ModelError]) -> None:
        self.outcomes = outcomes
        self.call_times: list[float] = []

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        self.call_times.append(trio.current_time())
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, ModelError):
            raise outcome
        if outcome.text:
            callbacks.on_text(outcome.text)
        return outcome

    async def list_models(self) -> list[str]:
        return ["fake"]

    async def aclose(self) -> None:
        return None


def fake_loop(client: ScriptedClient, tmp_path: Path, sink: RecordingSink) -> TurnLoop:
    history = History("system")
    history.add_user("go")
    return TurnLoop(
        model=client,
        tools=ToolRegistry(default_tools()),
        tool_context=lambda _item: ToolContext(tmp_path),
        history=history,
        sink=sink,
        new_id=iter(f"i{n}" for n in range(1, 1000)).__next__,
    )


def busy(retry_after: float | None = None) -> ModelHTTPError:
    return ModelHTTPError("busy", status=503, retryable=True, retry_after=retry_after)


async def test_retries_back_off_about_1_2_4_seconds(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    client = ScriptedClient([busy(), busy(), busy(), ModelResponse(text="finally")])
    sink = RecordingSink()
    outcome = await fake_loop(client, tmp_path, sink).run()
    assert outcome.status == "completed"
    gaps = [b - a for a, b in zip(client.call_times, client.call_times[1:], strict=False)]
    for gap, base in zip(gaps, (1, 2, 4), strict=True):
        assert base * 0.75 <= gap <= base * 1.25
    retries = [entry for kind, entry in sink.log if kind == "retry"]
    assert [str(r).split()[0] for r in retries] == ["1/3", "2/3", "3/3"]


async def test_retry_after_wins_and_too_long_gives_up(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    client = ScriptedClient([busy(retry_after=7.0), ModelResponse(text="ok")])
    outcome = await fake_loop(client, tmp_path, RecordingSink()).run()
    assert outcome.status == "completed"
    assert client.call_times[1] - client.call_times[0] == pytest.approx(7.0)

    patient = ScriptedClient([busy(retry_after=61.0), ModelResponse(text="never")])
    sink = RecordingSink()
    outcome = await fake_loop(patient, tmp_path, sink).run()
    assert outcome.status == "failed"
    assert len(patient.call_times) == 1


async def test_gives_up_after_three_retries_and_never_retries_auth(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    client = ScriptedClient([busy(), busy(), busy(), busy(), ModelResponse(text="late")])
    outcome = await fake_loop(client, tmp_path, RecordingSink()).run()
    assert outcome.status == "failed"
    assert len(client.call_times) == 4
    denied = ScriptedClient([ModelHTTPError("bad key", status=401), ModelResponse(text="x")])
    outcome = await fake_loop(denied, tmp_path, RecordingSink()).run()
    assert outcome.status == "failed"
    assert len(denied.call_times) == 1


async def test_a_retry_wait_is_cancellable(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    client = ScriptedClient([busy(retry_after=30.0), ModelResponse(text="x")])
    start = trio.current_time()
    with trio.move_on_after(5):
        await fake_loop(client, tmp_path, RecordingSink()).run()
    assert trio.current_time() - start == pytest.approx(5.0)
    assert len(client.call_times) == 1


async def test_output_limit_is_continued_at_most_twice(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    cut = {"text": "part", "finish_reason": "length"}
    server.set_script({"steps": [cut, cut, cut, {"text": "never asked"}]})
    sink = RecordingSink()
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink).run()
    assert outcome.status == "completed"
    assert len(server.requests) == 3
    assert server.requests[1]["messages"][-1]["content"].startswith("Your last reply was cut off")
    codes = [i.code for i in sink.completed() if isinstance(i, Notice)]
    assert codes == ["output_limit", "output_limit"]


async def test_third_identical_call_gets_one_note(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    same = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    server.set_script({"steps": [same, same, same, same, {"text": "done"}]})
    (tmp_path / "a.txt").write_text("x")
    sink = RecordingSink()
    with trio.fail_after(10):
        await make_loop(client, tmp_path, sink).run()
    outputs = [i.output for i in sink.completed() if isinstance(i, ToolCall)]
    assert [REPEAT_NOTE in o for o in outputs] == [False, False, True, False]


async def test_open_todos_get_one_reminder(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    server.set_script({"steps": [{"text": "all done"}, {"text": "really done"}]})
    sink = RecordingSink()
    sink.todos = ["write the tests"]
    with trio.fail_after(10):
        outcome = await make_loop(client, tmp_path, sink).run()
    assert outcome.status == "completed"
    assert len(server.requests) == 2
    reminder = server.requests[1]["messages"][-1]["content"]
    assert "- write the tests" in reminder


class NotedEdits:
    """A `ToolRunner` that is no `ToolRegistry`: one tool, `note`, which claims to edit the
    file it names and changes nothing; a note for a path starting with "bad" fails."""

    def __init__(self) -> None:
        schemas = ToolRegistry([NoteTool()])
        self.toolset = schemas.toolset
        self.validate = schemas.validate

    def is_read_only(self, name: str) -> bool:
        return False

    def runs_concurrently(self, name: str, params: ToolParams) -> bool:
        return False

    def edited_path(self, name: str, params: ToolParams) -> Path | None:
        assert isinstance(params, SleepParams)
        return Path(params.name)

    async def run(self, name: str, params: ToolParams, ctx: ToolContext) -> ToolResult:
        assert isinstance(params, SleepParams)
        failed = params.name.startswith("bad")
        return ToolResult(status="failed" if failed else "completed", output=f"noted {params.name}")


class NoteTool(SlowTool):
    name: ClassVar[str] = "note"


async def test_the_runner_names_the_edits_whose_files_are_diagnosed(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    calls = [{"name": "note", "arguments": {"name": n}} for n in ("a.py", "bad.py", "b.py")]
    server.set_script({"steps": [{"tool_calls": calls}, {"text": "done"}]})
    diagnosed: list[tuple[str, list[Path]]] = []

    async def diagnose(item: ToolCall, paths: list[Path]) -> str:
        diagnosed.append((json.loads(item.arguments)["name"], list(paths)))
        return "1 error"

    loop = make_loop(client, tmp_path, RecordingSink(), tools=NotedEdits())
    loop.diagnose = diagnose
    with trio.fail_after(10):
        outcome = await loop.run()
    assert outcome.status == "completed"
    # One report for the batch, with the result of its last edit, naming the edits that ran.
    assert diagnosed == [("b.py", [Path("a.py"), Path("b.py")])]
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert results == ["noted a.py", "noted bad.py", "noted b.py\n\n1 error"]


async def test_completed_calls_carry_exit_codes_diffs_and_durations(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    edit = {"path": "a.txt", "old_string": "two", "new_string": "TWO"}
    server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
                {
                    "tool_calls": [
                        {"name": "edit_file", "arguments": edit},
                        {"name": "write_file", "arguments": {"path": "new.txt", "content": "hi\n"}},
                        {
                            "name": "run_command",
                            "arguments": {"command": "echo no; exit 3", "description": "fail"},
                        },
                        {"name": "write_file", "arguments": {"path": "new.txt", "content": "hi\n"}},
                    ]
                },
                {"text": "done"},
            ]
        }
    )
    sink = RecordingSink()
    with trio.fail_after(20):
        await make_loop(client, tmp_path, sink).run()
    read, edited, created, command, rewritten = (
        i for i in sink.completed() if isinstance(i, ToolCall)
    )
    assert (read.exit_code, read.diff) == (None, "")
    assert edited.diff == "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
    assert created.diff == "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hi\n"
    assert rewritten.diff == ""  # the same content again changes nothing
    assert (command.status, command.exit_code, command.diff) == ("completed", 3, "")
    assert command.duration_seconds > 0
    assert command.output.startswith("exit code 3 · ")
