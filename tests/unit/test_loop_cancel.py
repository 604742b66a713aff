"""Every way out of a turn closes every open item: the turn loop with a real run_command (a
real process tree, whose nursery turns cancellation into an exception group), the scripted
model server over real HTTP, and a recording sink."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tether.daemon.context.history import History
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.run_command import RunCommand
from tether.daemon.tools.write_file import WriteFile
from tether.daemon.turn.loop import CANCELLED_RESULT, Diagnose, TurnLoop
from tether.protocol.items import AnyItem, ToolCall
from tether.protocol.session import QueuedInput
from tether.testing import ModelServer


class Sink:
    def __init__(self) -> None:
        self.started: list[AnyItem] = []
        self.completed: list[AnyItem] = []
        self.output = trio.Event()

    def item_started(self, item: AnyItem) -> None:
        self.started.append(item)

    def item_delta(self, item_id: str, delta: str) -> None:
        if "ready" in delta:
            self.output.set()

    def item_completed(self, item: AnyItem) -> None:
        self.completed.append(item)

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        pass

    def open_todos(self) -> list[str]:
        return []

    def take_queued(self) -> list[QueuedInput]:
        return []


@pytest.fixture
async def client() -> AsyncIterator[tuple[ModelServer, OpenAIChatClient]]:
    with ModelServer({"steps": [{"text": "unused"}]}) as server:
        model = OpenAIChatClient(base_url=server.base_url, model="scripted")
        yield server, model
        await model.aclose()


async def broken_diagnostics(item: ToolCall, paths: list[Path]) -> str:
    raise LookupError("a bug in the diagnostics hook")


def make_loop(
    model: OpenAIChatClient,
    workspace: Path,
    sink: Sink,
    tools: ToolRegistry,
    diagnose: Diagnose | None = None,
) -> TurnLoop:
    counter = iter(range(1, 10_000))
    history = History("system")
    history.add_user("go")
    return TurnLoop(
        model=model,
        tools=tools,
        tool_context=lambda item: ToolContext(
            workspace, output=lambda text: sink.item_delta(item.id, text)
        ),
        history=history,
        sink=sink,
        new_id=lambda: f"i{next(counter)}",
        diagnose=diagnose,
    )


def assert_all_closed(sink: Sink, loop: TurnLoop) -> list[ToolCall]:
    assert sorted(i.id for i in sink.started) == sorted(i.id for i in sink.completed)
    calls = [i for i in sink.completed if isinstance(i, ToolCall)]
    assert calls
    # The history answers every call, so the next model request is valid.
    answered = {m.tool_call_id for m in loop.history.messages if m.role == "tool"}
    assert answered == {c.call_id for c in calls}
    return calls


async def test_cancel_during_run_command_closes_the_call(
    client: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, model = client
    command = "echo ready; sleep 300"
    server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "arguments": {"command": command, "description": "wait"},
                        }
                    ]
                }
            ]
        }
    )
    sink = Sink()
    loop = make_loop(model, tmp_path, sink, ToolRegistry([RunCommand(grace=0.5)]))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                await loop.run()
                raise AssertionError("the loop returned instead of being cancelled")

            nursery.start_soon(turn)
            await sink.output.wait()
            nursery.cancel_scope.cancel()
    calls = assert_all_closed(sink, loop)
    assert [(c.tool, c.status, c.output) for c in calls] == [
        ("run_command", "cancelled", CANCELLED_RESULT)
    ]


async def test_an_unexpected_error_still_closes_the_call_and_propagates(
    client: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, model = client
    write = {"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}
    server.set_script({"steps": [{"tool_calls": [write]}]})
    sink = Sink()
    loop = make_loop(model, tmp_path, sink, ToolRegistry([WriteFile()]), broken_diagnostics)
    with trio.fail_after(10), pytest.raises(LookupError):
        await loop.run()
    calls = assert_all_closed(sink, loop)
    assert [c.status for c in calls] == ["failed"]
    assert "tether failed" in calls[0].output
