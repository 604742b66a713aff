"""The registry: default tools and their schemas, the result cap, and todo_write."""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import msgspec
import trio
import trio.testing

from tether.daemon.tools.base import (
    CommandTool,
    ConcurrentTool,
    EditTool,
    ExternalTool,
    SandboxedTool,
    SchemaTool,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    TrustGated,
    implements,
)
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.filetree import FileSearch
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.todo_write import TodoBoard, TodoWrite
from tether.daemon.truncate import cap_result, middle_truncate
from tether.protocol.events import TodoEntry


class SizeParams(ToolParams, frozen=True, kw_only=True):
    size: int
    fail: bool = False


class Loud:
    name: ClassVar[str] = "loud"
    description: ClassVar[str] = "returns `size` characters: 'H' * 10_000, then '.', then 'T'"
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SizeParams

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, SizeParams)
        text = "H" * 10_000 + "." * (params.size - 20_000) + "T" * 10_000
        if params.fail:
            raise ToolFailure(text)
        return text


def test_the_registry_and_the_turn_loop_load_no_tool() -> None:
    """The tools a turn has are the caller's choice: neither the registry nor the loop
    depends on any one tool (only `tether.daemon.tools.builtin` knows them all)."""
    tools = sorted(tool.__module__ for tool in default_tools())
    code = (
        "import sys, tether.daemon.tools.registry, tether.daemon.turn.loop\n"
        f"print(','.join(sorted(m for m in {tools!r} if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert tools
    assert out == ""


def test_default_tools_in_order_with_kinds() -> None:
    registry = ToolRegistry(default_tools())
    assert registry.names == [
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "find_definition",
        "find_references",
        "symbols",
        "hover",
        "edit_file",
        "write_file",
        "rename_symbol",
        "run_command",
        "command_output",
        "command_kill",
        "todo_write",
        "task",
    ]
    read_only = [name for name in registry.names if registry.is_read_only(name)]
    assert read_only == [
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "find_definition",
        "find_references",
        "symbols",
        "hover",
        "command_output",
    ]
    kinds = {tool.name: tool.kind for tool in default_tools()}
    assert kinds["edit_file"] == kinds["write_file"] == "edit"
    assert kinds["run_command"] == kinds["command_kill"] == "command"
    assert kinds["todo_write"] == kinds["task"] == "other"


def test_explore_tasks_run_beside_reads_and_general_ones_alone() -> None:
    registry = ToolRegistry(default_tools())
    explore = registry.validate("task", '{"description": "look", "prompt": "p"}')
    general = registry.validate(
        "task", '{"description": "do", "prompt": "p", "subagent_type": "general"}'
    )
    assert not isinstance(explore, str)
    assert not isinstance(general, str)
    assert registry.runs_concurrently("task", explore)
    assert not registry.runs_concurrently("task", general)
    read = registry.validate("read_file", '{"path": "a"}')
    edit = registry.validate("edit_file", '{"path": "a", "old_string": "x", "new_string": "y"}')
    assert not isinstance(read, str)
    assert not isinstance(edit, str)
    assert registry.runs_concurrently("read_file", read)
    assert not registry.runs_concurrently("edit_file", edit)
    assert isinstance(registry.validate("task", '{"description": "", "prompt": "p"}'), str)
    assert isinstance(
        registry.validate("task", '{"description": "x", "prompt": "p", "subagent_type": "other"}'),
        str,
    )


def test_schemas_are_self_contained_and_documented() -> None:
    registry = ToolRegistry(default_tools())
    for info in registry.infos():
        raw = bytes(info.input_schema)
        assert b"$ref" not in raw, info.name
        schema = json.loads(raw)
        assert schema["type"] == "object"
        for name, prop in schema["properties"].items():
            assert prop.get("description"), (info.name, name)
    todo = json.loads(
        bytes(next(i for i in registry.infos() if i.name == "todo_write").input_schema)
    )
    item = todo["properties"]["todos"]["items"]
    assert set(item["properties"]["status"]["enum"]) == {"pending", "in_progress", "completed"}


def test_descriptions_state_the_limits() -> None:
    descriptions = {tool.name: tool.description for tool in default_tools()}
    assert "1000 lines" in descriptions["read_file"]
    assert "1500 characters" in descriptions["read_file"]
    assert "10 MB" in descriptions["read_file"]
    assert "300 entries" in descriptions["list_dir"]
    assert "200" in descriptions["glob"]
    assert "default 100, max 500" in descriptions["grep"]
    assert "at most 10" in descriptions["grep"]
    assert "30 s" in descriptions["grep"]
    assert "1 MB" in descriptions["grep"]
    assert "120 s" in descriptions["run_command"]
    assert "600 s" in descriptions["run_command"]
    assert "6,000" in descriptions["run_command"]
    assert "14,000" in descriptions["run_command"]
    assert "at most one item is in_progress" in descriptions["todo_write"]


async def test_results_are_capped_keeping_40_percent_head_and_60_percent_tail() -> None:
    registry = ToolRegistry([Loud()])
    ctx = ToolContext(Path("."))
    with trio.fail_after(5):
        result = await registry.run("loud", SizeParams(size=50_000), ctx)
    assert result.status == "completed"
    assert len(result.output) <= 20_000
    match = re.fullmatch(r"(H+)\n\n\[… ([\d,]+) characters cut here …\]\n\n(\.*T+)", result.output)
    assert match is not None
    head, cut, tail = match.group(1), int(match.group(2).replace(",", "")), match.group(3)
    assert 7_950 <= len(head) <= 8_000  # 40% of 20,000, less a share of the marker
    assert 11_950 <= len(tail) <= 12_000  # 60%
    assert tail.endswith("T" * 10_000)
    assert cut == 50_000 - len(head) - len(tail)

    small = ToolContext(Path("."), result_cap=1_000)
    with trio.fail_after(5):
        failed = await registry.run("loud", SizeParams(size=30_000, fail=True), small)
    assert failed.status == "failed"
    assert len(failed.output) <= 1_000
    assert failed.output.startswith("H" * 350)
    assert failed.output.endswith("T" * 550)


def test_truncation_helpers() -> None:
    assert cap_result("short", 20_000) == "short"
    text = "a" * 100 + "b" * 100
    capped = cap_result(text, 100)
    assert len(capped) <= 100
    assert capped.startswith("a" * 20)
    assert capped.endswith("b" * 30)
    digits = "0123456789" * 10
    cut = middle_truncate(digits, 30, 70)
    assert len(cut) <= 100
    assert cut.startswith("0123456789")
    assert cut.endswith("0123456789" * 3)
    assert middle_truncate("x" * 10, 3, 3) == "x" * 6  # no room for a marker


# --- todo_write -------------------------------------------------------------------------------


class Board:
    def __init__(self) -> None:
        self.history: list[list[TodoEntry]] = []

    def set(self, todos: list[TodoEntry]) -> None:
        self.history.append(todos)


async def run_todos(ctx: ToolContext, todos: list[dict[str, str]]) -> tuple[str, str]:
    registry = ToolRegistry([TodoWrite()])
    params = registry.validate("todo_write", json.dumps({"todos": todos}))
    assert not isinstance(params, str), params
    with trio.fail_after(5):
        result = await registry.run("todo_write", params, ctx)
    return result.status, result.output


async def test_todo_write_sets_the_board(tmp_path: Path) -> None:
    board = Board()
    assert isinstance(board, TodoBoard)
    ctx = ToolContext(tmp_path, services={"todos": board})
    todos = [
        {"content": "Read the code", "status": "completed"},
        {"content": "Fix the bug", "status": "in_progress"},
        {"content": "Run the tests", "status": "pending"},
    ]
    status, output = await run_todos(ctx, todos)
    assert status == "completed"
    assert output.split("\n") == [
        "Todo list updated (1 of 3 completed):",
        "[x] Read the code",
        "[>] Fix the bug",
        "[ ] Run the tests",
    ]
    assert board.history == [
        [
            TodoEntry(content="Read the code", status="completed"),
            TodoEntry(content="Fix the bug", status="in_progress"),
            TodoEntry(content="Run the tests", status="pending"),
        ]
    ]
    status, output = await run_todos(ctx, [])
    assert (status, output) == ("completed", "The todo list is now empty.")
    assert board.history[-1] == []


async def test_todo_write_allows_one_item_in_progress(tmp_path: Path) -> None:
    board = Board()
    ctx = ToolContext(tmp_path, services={"todos": board})
    status, output = await run_todos(
        ctx,
        [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}],
    )
    assert status == "failed"
    assert "at most one" in output
    assert board.history == []


def test_todo_write_validates_items() -> None:
    registry = ToolRegistry([TodoWrite()])
    bad_status = registry.validate("todo_write", '{"todos": [{"content": "a", "status": "done"}]}')
    assert isinstance(bad_status, str)
    empty = registry.validate("todo_write", '{"todos": [{"content": "", "status": "pending"}]}')
    assert isinstance(empty, str)
    too_many = json.dumps({"todos": [{"content": "x", "status": "pending"}] * 101})
    assert isinstance(registry.validate("todo_write", too_many), str)


async def test_todo_write_without_a_board(tmp_path: Path) -> None:
    status, output = await run_todos(ToolContext(tmp_path), [])
    assert status == "failed"
    assert "not available" in output


def test_todo_entries_are_protocol_structs() -> None:
    entry = TodoEntry(content="x", status="in_progress")
    assert msgspec.json.decode(msgspec.json.encode(entry), type=TodoEntry) == entry


# --- failures of any kind are results; cancellation is not a failure ----------------------------


class RaiseParams(ToolParams, frozen=True, kw_only=True):
    what: str


class Raiser:
    """Raises what it is asked to, as a buggy tool (or one whose nursery failed) would."""

    name: ClassVar[str] = "raiser"
    description: ClassVar[str] = "raises"
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = RaiseParams

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, RaiseParams)
        match params.what:
            case "bug":
                raise KeyError("missing")
            case "nursery":
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_fail, "a child failed")
                    nursery.start_soon(trio.sleep_forever)
            case "group":
                raise ExceptionGroup("parts", [ToolFailure("first part"), ValueError("bad")])
            case "io":
                raise PermissionError(13, "Permission denied", "x.txt")
            case _:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.sleep_forever)
                    nursery.start_soon(trio.sleep_forever)
        return "unreachable"


async def _fail(message: str) -> None:
    raise ToolFailure(message)


async def test_an_unexpected_exception_is_a_failed_result_naming_it(tmp_path: Path) -> None:
    registry = ToolRegistry([Raiser()])
    ctx = ToolContext(tmp_path)
    with trio.fail_after(10):
        bug = await registry.run("raiser", RaiseParams(what="bug"), ctx)
        nursery = await registry.run("raiser", RaiseParams(what="nursery"), ctx)
        group = await registry.run("raiser", RaiseParams(what="group"), ctx)
        io = await registry.run("raiser", RaiseParams(what="io"), ctx)
    assert {r.status for r in (bug, nursery, group, io)} == {"failed"}
    assert "raiser failed with an unexpected error (KeyError: 'missing')" in bug.output
    assert nursery.output == "a child failed"
    assert "(ToolFailure: first part; ValueError: bad)" in group.output
    assert io.output == "raiser failed: [Errno 13] Permission denied: 'x.txt'"


async def test_cancellation_propagates_through_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The tool's nursery raises a group of Cancelled: that is a cancellation, not a failure.
    registry = ToolRegistry([Raiser()])
    results: list[object] = []
    with trio.fail_after(10):
        with trio.move_on_after(0.01) as scope:
            results.append(
                await registry.run("raiser", RaiseParams(what="wait"), ToolContext(tmp_path))
            )
    assert scope.cancelled_caught
    assert results == []


async def test_task_without_a_subagent_runner_fails_saying_so(tmp_path: Path) -> None:
    registry = ToolRegistry(default_tools())
    params = registry.validate("task", '{"description": "look", "prompt": "p"}')
    assert not isinstance(params, str)
    result = await registry.run("task", params, ToolContext(tmp_path))
    assert result.status == "failed"
    assert "Subagents are not available here" in result.output


def test_implements_answers_as_isinstance_for_every_tool_and_shape() -> None:
    shapes = [
        CommandTool,
        ConcurrentTool,
        EditTool,
        ExternalTool,
        FileSearch,
        SandboxedTool,
        SchemaTool,
        TrustGated,
    ]
    for tool in [*default_tools(), None, object()]:
        for shape in shapes:
            expected = isinstance(tool, shape)
            assert implements(tool, shape) is expected  # asked first: found, then remembered
            assert implements(tool, shape) is expected
    tools = default_tools()
    edit_tools = [tools[i].name for i in range(len(tools)) if implements(tools[i], EditTool)]
    assert sorted(edit_tools) == ["edit_file", "rename_symbol", "write_file"]
