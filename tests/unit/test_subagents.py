"""Subagents (the `task` tool) in-process: real sessions over a real store, real tools over a
temporary workspace, the scripted model server over real HTTP serving the agent's requests
and its subagents' alike (each step matched to its conversation by its first user message)."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.inprocess import Watcher, running_sessions
from tests.support import alive
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.daemon.sessions.subagents import MAX_PER_TURN, MAX_RUNNING, NO_REPORT
from tether.protocol.events import (
    ApprovalRequested,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ItemUpdated,
    PermissionMode,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, AnyItem, ToolCall, TurnSummary
from tether.testing import ModelServer

PARENT = "parent-task:"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def task(description: str, prompt: str, subagent_type: str = "explore") -> dict[str, Any]:
    return call("task", description=description, prompt=prompt, subagent_type=subagent_type)


def step(
    match: str, *calls: dict[str, Any], text: str | None = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"match": match, **extra}
    if calls:
        out["tool_calls"] = list(calls)
    if text is not None:
        out["text"] = text
    return out


class Rig:
    def __init__(self, sessions: Sessions, server: ModelServer, workspace: Path) -> None:
        self.sessions = sessions
        self.server = server
        self.workspace = workspace

    async def session(self, mode: PermissionMode = "edits") -> tuple[Session, Watcher]:
        session = await self.sessions.create(permission_mode=mode)
        watcher = Watcher()
        session.attach(watcher, "controller", None)
        return session, watcher

    def start(self, session: Session, text: str = f"{PARENT} look around") -> None:
        self.sessions.start_turn(session, TurnRequest(text=text))

    async def turn(self, session: Session, text: str = f"{PARENT} look around") -> None:
        self.start(session, text)
        await self.sessions.wait_idle(session.id)

    def requests_of(self, match: str) -> list[dict[str, Any]]:
        return [r for r in self.server.requests if match in first_user(r)]


def first_user(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README.md").write_text("zebra-readme-content\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def greet():\n    return 'hi'\n")
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    try:
        with ModelServer({"steps": [{"text": "unused"}]}) as server:
            with trio.fail_after(20):
                async with running_sessions(store, workspace, server, keep_idle=1) as sessions:
                    yield Rig(sessions, server, workspace)
    finally:
        store.close()


def completed(watcher: Watcher) -> list[AnyItem]:
    return [e.item for e in watcher.events if isinstance(e, ItemCompleted)]


def task_calls(watcher: Watcher) -> list[ToolCall]:
    """The completed task calls, in the order they were asked for."""
    done = {i.id: i for i in completed(watcher) if isinstance(i, ToolCall) and i.tool == "task"}
    started = [e.item.id for e in watcher.events if isinstance(e, ItemStarted)]
    return [done[item_id] for item_id in started if item_id in done]


def nested(watcher: Watcher, parent: str) -> list[AnyItem]:
    return [i for i in completed(watcher) if i.parent_item_id == parent]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def running_order(watcher: Watcher) -> list[tuple[str, str]]:
    """("running" | "done", task item id) in the order the events came."""
    order: list[tuple[str, str]] = []
    for event in watcher.events:
        if isinstance(event, ItemUpdated) and isinstance(event.item, ToolCall):
            sub = event.item.subagent
            if sub is not None and sub.state == "running":
                order.append(("running", event.item.id))
        elif (
            isinstance(event, ItemCompleted)
            and isinstance(event.item, ToolCall)
            and event.item.tool == "task"
        ):
            order.append(("done", event.item.id))
    return order


# --- parallel explore subagents, nesting, the report ------------------------------------------


async def test_explore_subagents_of_one_response_run_at_once_nest_and_report_in_order(
    rig: Rig,
) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(
                    PARENT,
                    task("Find the readme", "alpha: what does README.md say?"),
                    task("List the sources", "beta: what is in src?"),
                    usage={"prompt_tokens": 50, "completion_tokens": 5},
                ),
                step(
                    "alpha:",
                    call("read_file", path="README.md"),
                    usage={"prompt_tokens": 7, "completion_tokens": 3},
                ),
                step(
                    "beta:",
                    call("list_dir", path="src"),
                    usage={"prompt_tokens": 11, "completion_tokens": 5},
                ),
                step(
                    "alpha:",
                    text="alpha report",
                    usage={"prompt_tokens": 13, "completion_tokens": 2},
                ),
                step(
                    "beta:", text="beta report", usage={"prompt_tokens": 17, "completion_tokens": 4}
                ),
                step(
                    PARENT, text="all done", usage={"prompt_tokens": 100, "completion_tokens": 10}
                ),
            ]
        }
    )
    session, watcher = await rig.session()
    await rig.turn(session)

    alpha, beta = task_calls(watcher)
    assert (alpha.status, alpha.output, beta.status, beta.output) == (
        "completed",
        "alpha report",
        "completed",
        "beta report",
    )
    # Both were running before either finished.
    order = running_order(watcher)
    assert [kind for kind, _ in order] == ["running", "running", "done", "done"]
    # Their items nest under their own task call.
    alpha_items, beta_items = nested(watcher, alpha.id), nested(watcher, beta.id)
    assert [i.tool for i in alpha_items if isinstance(i, ToolCall)] == ["read_file"]
    assert [i.tool for i in beta_items if isinstance(i, ToolCall)] == ["list_dir"]
    assert [i.text for i in alpha_items if isinstance(i, AgentMessage)] == ["alpha report"]
    assert alpha.subagent is not None
    assert alpha.subagent.state == "done"
    assert (alpha.subagent.description, alpha.subagent.model_calls) == ("Find the readme", 2)
    assert (alpha.subagent.input_tokens, alpha.subagent.output_tokens) == (20, 5)

    # A subagent starts from a fresh context: its system prompt and its prompt, nothing else.
    first = rig.requests_of("alpha:")[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "alpha: what does README.md say?"
    assert "subagent" in first["messages"][0]["content"]
    # Only the reports enter the parent's conversation, in the order of the calls.
    last = rig.requests_of(PARENT)[-1]
    assert tool_results(last) == ["alpha report", "beta report"]
    assert "zebra-readme-content" not in msgspec.json.encode(last).decode()

    # Their tokens count in the turn's summary and usage.
    summary = next(i for i in completed(watcher) if isinstance(i, TurnSummary))
    assert (summary.input_tokens, summary.output_tokens) == (50 + 100 + 48, 5 + 10 + 14)
    end = next(e for e in watcher.events if isinstance(e, TurnCompleted))
    assert (end.usage.input_tokens, end.usage.output_tokens) == (198, 29)
    assert summary.model_calls == 2


async def test_history_sent_after_a_reload_holds_only_the_reports(rig: Rig) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, task("Read the readme", "alpha: read README.md")),
                step("alpha:", call("read_file", path="README.md")),
                step("alpha:", text="alpha report"),
                step(PARENT, text="all done"),
                step(PARENT, text="again"),
            ]
        }
    )
    session, watcher = await rig.session()
    await rig.turn(session)
    session.detach(watcher)
    before = rig.requests_of(PARENT)[-1]["messages"]
    await rig.sessions.create()  # keep_idle=1: the first session is unloaded
    again = await rig.sessions.get(session.id)
    assert again is not session
    await rig.turn(again, f"{PARENT} and again")
    sent = rig.requests_of(PARENT)[-1]["messages"]
    # The rebuilt history is the one sent before, with the turn's answer and the new message.
    assert [m["role"] for m in sent] == [*(m["role"] for m in before), "assistant", "user"]
    assert tool_results({"messages": sent}) == ["alpha report"]


# --- tool sets -------------------------------------------------------------------------------


async def test_each_type_is_offered_its_tools_and_explore_cannot_edit(rig: Rig) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(
                    PARENT,
                    task("Look", "explore-one: look"),
                    task("Do", "general-one: do", "general"),
                ),
                step(
                    "explore-one:",
                    call("edit_file", path="README.md", old_string="z", new_string="y"),
                ),
                step("explore-one:", text="could not edit"),
                step("general-one:", text="did nothing"),
                step(PARENT, text="fine"),
            ]
        }
    )
    session, watcher = await rig.session(mode="auto")
    await rig.turn(session)

    explore = rig.requests_of("explore-one:")[0]
    general = rig.requests_of("general-one:")[0]
    looking = ["find_definition", "find_references", "symbols", "hover"]
    assert tool_names(explore) == ["read_file", "list_dir", "glob", "grep", *looking]
    assert tool_names(general) == [
        "read_file",
        "list_dir",
        "glob",
        "grep",
        *looking,
        "edit_file",
        "write_file",
        "rename_symbol",
        "run_command",
    ]
    parent = rig.requests_of(PARENT)[0]
    assert {"task", "todo_write"} <= set(tool_names(parent))
    # Calling a tool it is not offered is refused, and nothing changes.
    look = task_calls(watcher)[0]
    refused = next(i for i in nested(watcher, look.id) if isinstance(i, ToolCall))
    assert refused.status == "failed"
    assert "edit_file is not available to an explore subagent" in refused.output
    assert (rig.workspace / "README.md").read_text() == "zebra-readme-content\n"


# --- limits ------------------------------------------------------------------------------------


async def test_at_most_four_run_at_once_and_the_rest_wait_queued(rig: Rig) -> None:
    jobs = [f"job-{n:02}:" for n in range(MAX_RUNNING + 2)]
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, *(task(f"Job {n}", f"{job} look") for n, job in enumerate(jobs))),
                *(step(job, call("list_dir")) for job in jobs),
                *(step(job, text=f"{job} report") for job in jobs),
                step(PARENT, text="done"),
            ]
        }
    )
    session, watcher = await rig.session()
    await rig.turn(session)

    calls = task_calls(watcher)
    assert [c.output for c in calls] == [f"{job} report" for job in jobs]
    running = peak = 0
    for kind, _ in running_order(watcher):
        running += 1 if kind == "running" else -1
        peak = max(peak, running)
    assert peak == MAX_RUNNING
    queued = [
        e.item.id
        for e in watcher.events
        if isinstance(e, ItemUpdated)
        and isinstance(e.item, ToolCall)
        and e.item.subagent is not None
        and e.item.subagent.state == "queued"
    ]
    assert len(queued) == 2
    snapshot_states = {  # the snapshot keeps the latest copy of each item
        i.id: i.subagent.state
        for t in session.snapshot().turns
        for i in t.items
        if isinstance(i, ToolCall) and i.subagent is not None
    }
    assert set(snapshot_states.values()) == {"done"}


async def test_the_thirteenth_subagent_of_a_turn_is_not_started_and_says_why(rig: Rig) -> None:
    jobs = [f"job-{n:02}:" for n in range(MAX_PER_TURN + 1)]
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, *(task(f"Job {n}", f"{job} look") for n, job in enumerate(jobs))),
                *(step(job, text=f"{job} report") for job in jobs),
                step(PARENT, text="done"),
            ]
        }
    )
    session, watcher = await rig.session()
    await rig.turn(session)

    calls = task_calls(watcher)
    refused = [c for c in calls if c.status == "failed"]
    assert len(refused) == 1
    assert f"at most {MAX_PER_TURN} subagents" in refused[0].output
    assert nested(watcher, refused[0].id) == []
    assert sum(c.status == "completed" for c in calls) == MAX_PER_TURN
    # Only twelve subagents asked the model anything.
    assert len(rig.server.requests) == 1 + MAX_PER_TURN + 1


# --- general subagents ---------------------------------------------------------------------


async def test_a_general_subagent_edits_alone_with_its_own_reads_and_named_approvals(
    rig: Rig,
) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, call("read_file", path="src/app.py")),
                step(
                    PARENT,
                    task("Fix the greeting", "gen: make greet say hello", "general"),
                    task("Check the readme", "exp: read README.md"),
                ),
                # Its read versions are its own: the parent's read does not let it edit.
                step(
                    "gen:",
                    call("edit_file", path="src/app.py", old_string="'hi'", new_string="'hello'"),
                ),
                step("gen:", call("read_file", path="src/app.py")),
                step(
                    "gen:",
                    call("edit_file", path="src/app.py", old_string="'hi'", new_string="'hello'"),
                ),
                step("gen:", text="greet now says hello"),
                step("exp:", text="the readme is short"),
                step(PARENT, text="done"),
            ]
        }
    )
    session, watcher = await rig.session(mode="ask")
    rig.start(session)
    broker = await rig.sessions.broker(session.id)
    # Reads ask nothing, and the edit made before reading fails its preview without asking:
    # the one question is the second edit's.
    asked = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(asked, ApprovalRequested)
    assert asked.approval.subagent == "Fix the greeting"
    broker.respond(asked.approval.id, decision="allow", scope="once", by="test")
    await rig.sessions.wait_idle(session.id)

    gen, exp = task_calls(watcher)
    assert (gen.status, gen.output) == ("completed", "greet now says hello")
    assert (rig.workspace / "src" / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    edits = [i for i in nested(watcher, gen.id) if isinstance(i, ToolCall)]
    assert [(i.tool, i.status) for i in edits] == [
        ("edit_file", "failed"),
        ("read_file", "completed"),
        ("edit_file", "completed"),
    ]
    assert "read" in edits[0].output.lower()
    assert edits[2].diff
    # The approval named the call nested under the general subagent's task call.
    assert [e.approval.item_id for e in watcher.events if isinstance(e, ApprovalRequested)] == [
        edits[2].id
    ]
    # It ran alone: the explore subagent after it started only once it had finished.
    assert running_order(watcher) == [
        ("running", gen.id),
        ("done", gen.id),
        ("running", exp.id),
        ("done", exp.id),
    ]


async def test_cancelling_the_turn_kills_a_subagents_command_tree(rig: Rig) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, task("Run it", "runner: run the long thing", "general")),
                step(
                    "runner:",
                    call(
                        "run_command",
                        command="sh -c 'sleep 300 & echo child=$!; wait'",
                        description="a long wait",
                    ),
                ),
                step("runner:", text="never"),
            ]
        }
    )
    session, watcher = await rig.session(mode="auto")
    rig.start(session)
    delta = await watcher.wait_for(lambda e: isinstance(e, ItemDelta) and "child=" in e.delta)
    assert isinstance(delta, ItemDelta)
    child = int(delta.delta.split("child=")[1].split()[0])
    assert alive(child)
    rig.sessions.cancel_turn(session, None)
    await rig.sessions.wait_idle(session.id)

    assert not alive(child)
    (run,) = task_calls(watcher)
    command = next(i for i in nested(watcher, run.id) if isinstance(i, ToolCall))
    assert (run.status, command.status) == ("cancelled", "cancelled")
    end = next(e for e in watcher.events if isinstance(e, TurnCompleted))
    assert end.status == "cancelled"
    # Nothing was left running in the session's state.
    assert not session.turns[-1].open_items


# --- the report ------------------------------------------------------------------------------


async def test_only_the_final_reply_is_the_report_and_an_empty_one_says_so(rig: Rig) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, task("Look", "quiet: look")),
                step("quiet:", call("list_dir"), text="let me look first"),
                step("quiet:", text=""),
                step(PARENT, text="ok"),
            ]
        }
    )
    session, watcher = await rig.session()
    await rig.turn(session)
    (look,) = task_calls(watcher)
    assert (look.status, look.output) == ("completed", NO_REPORT)
    assert tool_results(rig.requests_of(PARENT)[-1]) == [NO_REPORT]


# --- its model ---------------------------------------------------------------------------------


async def test_a_session_may_give_its_subagents_another_model(rig: Rig) -> None:
    rig.server.set_script(
        {
            "steps": [
                step(PARENT, task("Look", "small: look")),
                step("small:", text="small report"),
                step(PARENT, text="ok"),
            ]
        }
    )
    session, watcher = await rig.session()
    session.configure(subagent_model="tiny-model")
    assert session.info().subagent_model == "tiny-model"
    await rig.turn(session)
    assert [r["model"] for r in rig.server.requests] == ["scripted", "tiny-model", "scripted"]
    (look,) = task_calls(watcher)
    assert look.subagent is not None
    assert look.subagent.model == "tiny-model"
