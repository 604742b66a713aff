"""Compaction: the stubs of steps 1 and 2, the model-written summary of step 3 (through the real
HTTP stack against the scripted model server, in both dialects), the ladder's decisions, and
the stable prompt prefix across every step of a real turn loop."""

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio

from tether.daemon.context import compact
from tether.daemon.context.budget import TokenMeter, messages_tokens
from tether.daemon.context.compact import (
    SUMMARY_INSTRUCTION,
    CompactionError,
    apply_elisions,
    compact_history,
    elide_before_new_turn,
    elide_old_tool_results,
    is_stub,
    plan_compaction,
    stub_for,
    summarise,
    summary_cut,
)
from tether.daemon.context.history import SUMMARY_CONTINUE, SUMMARY_HEADER, History, is_summary
from tether.daemon.providers import anthropic, openai
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import (
    Message,
    ModelClient,
    ModelRequest,
    ModelResponse,
    QuietCallbacks,
    StreamCallbacks,
    ToolCallRequest,
    ToolSet,
)
from tether.daemon.providers.openai import OpenAIChatClient, encode_message, encode_tools
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.turn.loop import TurnLoop
from tether.protocol.session import QueuedInput
from tether.testing import ModelServer

SYSTEM = "You are tether. Workspace root: /w\nEnvironment: Linux\n"
SUMMARY_TEXT = (
    "## User requests\n- Fix the greeting (in progress)\n## Work done\n- Read src/app.py\n"
    "## Important facts\n- greet is defined at src/app.py:1\n## Current state\n- Not edited\n"
    "## Next steps\n- Edit greet"
)


def result_text(index: int, size: int) -> str:
    line = f"{index:>4}| some file content of result {index}\n"
    return (line * (size // len(line) + 1))[:size]


def build_history(
    sizes: Sequence[int], *, calls_per_step: int = 1, turns: int = 1, tools: str = "read_file"
) -> History:
    """A conversation of `turns` turns sharing the tool results of `sizes` (one result per
    entry, `calls_per_step` results per assistant message)."""
    history = History(SYSTEM)
    per_turn = max(len(sizes) // turns, 1)
    index = 0
    while index < len(sizes):
        if index % per_turn == 0:
            history.add_user(f"request {index // per_turn + 1}: look at the code")
        batch = sizes[index : index + calls_per_step]
        calls = [
            ToolCallRequest(
                id=f"call_{index + k}", name=tools, arguments=json.dumps({"path": f"f{index + k}"})
            )
            for k in range(len(batch))
        ]
        history.add_assistant(f"Reading batch {index}.", calls)
        for k, size in enumerate(batch):
            history.add_tool_result(f"call_{index + k}", result_text(index + k, size))
        index += len(batch)
    return history


def assert_valid(messages: Sequence[Message]) -> None:
    """Every tool result answers a call of the assistant message before it, every call is
    answered before anything else, and the system prompt comes first and only there."""
    assert messages[0].role == "system"
    pending: set[str] = set()
    for message in messages[1:]:
        assert message.role != "system"
        if message.role == "tool":
            assert message.tool_call_id in pending, f"orphan result {message.tool_call_id}"
            pending.remove(message.tool_call_id)
            continue
        assert not pending, f"calls without results: {pending}"
        if message.role == "assistant":
            pending = {c.id for c in message.tool_calls}
    assert not pending


def toolset() -> ToolSet:
    return ToolRegistry(default_tools()).toolset


def prefix_bytes(history: History, tools: ToolSet) -> list[bytes]:
    """The stable prefix as each dialect encodes it."""
    system = history.messages[0]
    anthropic_system = anthropic.encode_system(system, tools, text_mode=False)
    assert anthropic_system is not None
    return [
        bytes(encode_message(system)),
        bytes(encode_tools(tools)),
        bytes(anthropic_system),
        bytes(anthropic.encode_tools(tools)),
        b"".join(bytes(m) for m in openai.encode_text_messages(history.messages[:1], tools)),
    ]


# --- steps 1 and 2 ---------------------------------------------------------------------------


def test_step1_keeps_the_newest_six_results_and_stubs_older_long_ones() -> None:
    sizes = [5_000, 300, 601, 600, 2_000, 700, 700, 700, 700, 700, 700]
    history = build_history(sizes)
    before = [m.content for m in history.messages]
    elision = elide_old_tool_results(history)
    results = [m for m in history.messages if m.role == "tool"]
    # The five older results: 5,000 and 601 and 2,000 are stubbed; 300 and 600 stay.
    assert [is_stub(m.content) for m in results] == [
        True, False, True, False, True, *[False] * 6,
    ]  # fmt: skip
    assert elision.messages == 3
    assert elision.chars_removed == sum(
        n - len(stub_for("read_file", result_text(i, n)))
        for i, n in ((0, 5_000), (2, 601), (4, 2_000))
    )
    assert results[0].content == (
        "[tether elided 5,000 characters of this read_file result to save context; "
        "call read_file again if you need them]"
    )
    for message, old in zip(history.messages, before, strict=True):
        if message.role != "tool":
            assert message.content == old
    assert_valid(history.messages)


def test_stubs_are_deterministic_and_never_stubbed_again() -> None:
    one, two = build_history([3_000] * 12), build_history([3_000] * 12)
    elide_old_tool_results(one)
    elide_old_tool_results(two)
    encoded = [bytes(encode_message(m)) for m in one.messages]
    assert encoded == [bytes(encode_message(m)) for m in two.messages]
    # Run again, and with a lower threshold than a stub's length: nothing changes.
    assert elide_old_tool_results(one).messages == 0
    assert elide_old_tool_results(one, keep=0, threshold=10).messages == 6
    assert elide_before_new_turn(one, threshold=10).messages == 0
    assert [bytes(encode_message(m)) for m in one.messages][:13] == encoded[:13]
    # A tool result whose tool is unknown gets a generic stub.
    assert stub_for("", "x" * 700).endswith(
        "of this tool result to save context; call the tool again if you need them]"
    )


def test_stubbed_messages_drop_their_encodings_and_the_prefix_stays_byte_identical() -> None:
    history = build_history([2_000] * 10, calls_per_step=2)
    tools = toolset()
    prefix = prefix_bytes(history, tools)
    system_raw = encode_message(history.messages[0])
    cached = {id(m): encode_message(m) for m in history.messages}
    for m in history.messages:
        anthropic.encode_blocks(m)
    elide_old_tool_results(history)
    for message in history.messages:
        if is_stub(message.content):
            assert message.cache == {}
            assert bytes(encode_message(message)) != bytes(cached[id(message)])
            assert json.loads(bytes(encode_message(message)))["content"] == message.content
        else:
            assert encode_message(message) is cached[id(message)]
    assert encode_message(history.messages[0]) is system_raw
    elide_before_new_turn(history, threshold=100)
    assert prefix_bytes(history, tools) == prefix
    assert_valid(history.messages)


def test_step2_stubs_every_earlier_result_over_1500_characters() -> None:
    history = build_history([1_500, 1_501, 9_000, 200, 1_600], turns=2)
    elision = elide_before_new_turn(history)
    results = [m for m in history.messages if m.role == "tool"]
    assert [is_stub(m.content) for m in results] == [False, True, True, False, True]
    assert elision.messages == 3
    assert_valid(history.messages)


# --- step 3: where to cut --------------------------------------------------------------------


def test_summary_cut_never_separates_calls_from_their_results() -> None:
    history = build_history([900] * 9, calls_per_step=3, turns=3)
    history.add_assistant("All three read.", [])
    messages = history.messages
    total = messages_tokens(messages)
    for keep in range(0, total + 50, 7):
        cut = summary_cut(messages, keep)
        assert cut is not None
        assert 2 <= cut <= len(messages)
        assert messages_tokens(messages[cut:]) <= keep or cut == len(messages)
        assert_valid([messages[0], Message(role="user", content="summary"), *messages[cut:]])
        # The earliest cut that fits: one valid cut earlier would keep too much.
        earlier = [
            c
            for c in range(2, cut)
            if messages[c].role != "tool"
            and not (messages[c - 1].role == "assistant" and messages[c - 1].tool_calls)
        ]
        if earlier:
            assert messages_tokens(messages[earlier[-1] :]) > keep


def test_summary_cut_with_nothing_to_summarise_or_an_unanswered_call() -> None:
    assert summary_cut(History(SYSTEM).messages, 1_000) is None
    folded = History(SYSTEM)
    folded.add_user(f"{SUMMARY_HEADER}\nearlier")
    assert summary_cut(folded.messages, 1_000) is None
    folded.add_user("and now this")
    assert summary_cut(folded.messages, 0) is None  # the request not yet answered stays
    folded.add_assistant("answered", [])
    assert summary_cut(folded.messages, 0) == 4
    open_call = build_history([100, 100])
    open_call.add_assistant("one more", [ToolCallRequest(id="x", name="read_file", arguments="{}")])
    cut = summary_cut(open_call.messages, 0)
    assert cut == len(open_call.messages) - 1


def test_the_users_unanswered_message_is_never_summarised_however_large() -> None:
    history = build_history([3_000] * 10, turns=2)
    request = "please review this: " + "x" * 400_000
    history.add_user(request)
    messages = history.messages
    for keep in (0, 1_000, 50_000):
        cut = summary_cut(messages, keep)
        assert cut == len(messages) - 1
        assert messages[-1].content == request


# --- step 3 through the real HTTP stack ------------------------------------------------------


@pytest.fixture
async def model() -> AsyncIterator[tuple[ModelServer, OpenAIChatClient]]:
    with ModelServer({"steps": [{"text": SUMMARY_TEXT}]}) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="scripted")
        yield server, client
        await client.aclose()


async def test_summarise_asks_without_tools_and_replaces_the_older_history(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([3_000] * 8, turns=2)
    history.add_assistant("Both read; now the fix.", [])
    history.add_user("Go on and fix it")
    system = history.messages[0]
    system_raw = bytes(encode_message(system))
    keep = messages_tokens(history.messages[-6:])  # the last result onwards
    expected_cut = summary_cut(history.messages, keep)
    assert expected_cut is not None
    older_count = expected_cut - 1
    kept = history.messages[expected_cut:]

    tokens_before = messages_tokens(history.messages)
    summary = await summarise(history, client, keep_recent_tokens=keep)

    assert summary is not None
    request = server.requests[0]
    assert "tools" not in request
    sent = request["messages"]
    assert sent[0] == {"role": "system", "content": SYSTEM}
    assert sent[-1] == {"role": "user", "content": SUMMARY_INSTRUCTION}
    assert len(sent) == 1 + older_count + 1
    for section in ("User requests", "Work done", "Important facts", "Current state", "Next steps"):
        assert f"## {section}" in SUMMARY_INSTRUCTION
    assert "path:line" in SUMMARY_INSTRUCTION

    assert summary.text == SUMMARY_TEXT
    assert (summary.replaced, summary.kept) == (older_count, len(kept))
    assert messages_tokens(history.messages) < tokens_before
    assert history.messages[0] is system
    assert bytes(encode_message(history.messages[0])) == system_raw
    assert history.messages[1].role == "user"
    assert history.messages[1].content.startswith(f"{SUMMARY_HEADER}\n")
    assert SUMMARY_TEXT in history.messages[1].content
    assert history.messages[2:] == kept
    assert all(a is b for a, b in zip(history.messages[2:], kept, strict=True))
    assert_valid(history.messages)

    # A history rebuilt after a restart gets the same conversation back from the summary's
    # text and the number of messages it kept.
    rebuilt = build_history([3_000] * 8, turns=2)
    rebuilt.add_assistant("Both read; now the fix.", [])
    rebuilt.add_user("Go on and fix it")
    rebuilt.replace_with_summary(summary.text, kept=summary.kept)
    assert [bytes(encode_message(m)) for m in rebuilt.messages] == [
        bytes(encode_message(m)) for m in history.messages
    ]


async def test_a_second_summary_folds_in_the_first(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([1_000] * 4)
    assert await summarise(history, client, keep_recent_tokens=0) is not None
    history.add_user("next request")
    history.add_assistant("done", [])
    server.set_script({"steps": [{"text": "second summary"}]})
    summary = await summarise(history, client, keep_recent_tokens=0)
    assert summary is not None
    sent = server.requests[0]["messages"]
    assert sent[1]["content"].startswith(SUMMARY_HEADER)
    assert [m.role for m in history.messages] == ["system", "user"]
    assert "second summary" in history.messages[1].content
    assert history.messages[1].content.endswith(SUMMARY_CONTINUE)


async def test_a_summarised_history_is_valid_for_both_dialects(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([2_000] * 9, calls_per_step=3, turns=2)
    elide_before_new_turn(history)
    history.add_user("and the last thing")
    history.add_assistant("", [ToolCallRequest(id="z", name="read_file", arguments="{}")])
    history.add_tool_result("z", "the newest result")
    assert await summarise(history, client, keep_recent_tokens=30) is not None
    assert_valid(history.messages)
    server.set_script({"steps": [{"text": "fine"}, {"text": "fine"}]})
    tools = toolset()
    request = ModelRequest(messages=history.messages, tools=tools)
    claude = AnthropicMessagesClient(base_url=server.base_url, model="scripted", api_key="k")
    try:
        assert (await claude.complete(request, QuietCallbacks())).text == "fine"
    finally:
        await claude.aclose()
    assert (await client.complete(request, QuietCallbacks())).text == "fine"


async def test_an_empty_summary_leaves_the_history_alone(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    server.set_script({"steps": [{"text": "   "}]})
    history = build_history([1_000] * 3)
    before = list(history.messages)
    with pytest.raises(CompactionError, match="empty summary"):
        await summarise(history, client, keep_recent_tokens=0)
    assert history.messages == before


async def test_a_cancelled_summary_leaves_the_history_alone(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    server.set_script({"steps": [{"text": "late", "delay_ms": 5_000}]})
    history = build_history([1_000] * 3)
    before = list(history.messages)
    with trio.move_on_after(0.2) as scope:
        await summarise(history, client, keep_recent_tokens=0)
    assert scope.cancelled_caught
    assert history.messages == before


async def test_nothing_to_summarise_makes_no_call(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    assert await summarise(History(SYSTEM), client, keep_recent_tokens=0) is None
    assert server.requests == []


async def test_the_summary_request_is_cut_to_fit_the_budget(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([20_000] * 6)
    before = [m.content for m in history.messages]
    summary = await summarise(history, client, keep_recent_tokens=0, request_budget=5_000)
    assert summary is not None
    sent = server.requests[0]["messages"]
    chars = sum(len(m.get("content") or "") for m in sent)
    assert chars / 3.5 <= 5_000
    assert sent[0]["content"] == SYSTEM
    assert sent[-1]["content"] == SUMMARY_INSTRUCTION
    assert summary.replaced == len(before) - 1  # the whole history was summarised all the same
    tool_results = [m for m in sent if m["role"] == "tool"]
    assert tool_results
    assert all("characters cut here" in m["content"] for m in tool_results)


# --- the ladder ------------------------------------------------------------------------------


def meter_for(history: History, budget: int) -> TokenMeter:
    return TokenMeter(history.messages, budget=budget)


def test_plan_runs_nothing_below_half_the_budget() -> None:
    history = build_history([3_000] * 10)
    used = messages_tokens(history.messages)
    plan = plan_compaction(history, meter_for(history, used * 2 + 2))
    assert (plan.earlier_turns, plan.old_tool_results, plan.summary) == (False, False, False)
    assert plan.expected == plan.used == used


def test_plan_elides_from_half_the_budget_and_predicts_the_result() -> None:
    history = build_history([3_000] * 10)
    used = messages_tokens(history.messages)
    meter = meter_for(history, used * 2 - 10)
    plan = plan_compaction(history, meter)
    assert (plan.old_tool_results, plan.summary) == (True, False)
    records = apply_elisions(history, meter, plan)
    assert [r.step for r in records] == ["old_tool_results"]
    assert records[0].messages == 4
    assert records[0].tokens_before == used
    assert records[0].tokens_after == meter.used()
    assert abs(meter.used() - plan.expected) <= 2


def test_plan_keeps_fewer_results_whole_before_it_summarises() -> None:
    history = build_history([3_000] * 10)
    results = [m for m in history.messages if m.role == "tool"]
    five = messages_tokens(results[-5:])
    # Six or five whole results do not fit, four do: step 1 keeps four.
    meter = meter_for(history, five - 10)
    plan = plan_compaction(history, meter)
    assert (plan.old_tool_results, plan.keep, plan.summary) == (True, 4, False)
    assert plan.expected <= meter.budget
    apply_elisions(history, meter, plan)
    assert [is_stub(m.content) for m in results] == [True] * 6 + [False] * 4
    assert meter.used() <= meter.budget


def test_plan_summarises_when_eliding_is_not_enough() -> None:
    history = build_history([3_000] * 10)
    one = messages_tokens([m for m in history.messages if m.role == "tool"][-1:])
    plan = plan_compaction(history, meter_for(history, one))
    # Not even one whole result fits: keep six for the summary to read.
    assert (plan.old_tool_results, plan.keep, plan.summary) == (True, 6, True)
    assert plan.expected > one


def test_plan_on_a_new_turn_stubs_earlier_results_whatever_the_budget() -> None:
    history = build_history([3_000] * 4, turns=2)
    plan = plan_compaction(history, meter_for(history, 10**9), new_turn=True)
    assert (plan.earlier_turns, plan.old_tool_results, plan.summary) == (True, False, False)
    forced = plan_compaction(history, meter_for(history, 10**9), force_summary=True)
    assert forced.summary


async def test_the_ladder_reports_each_step_with_tokens_before_and_after(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([3_000] * 10, turns=2)
    history.add_user("third request")
    whole_six = messages_tokens([m for m in history.messages if m.role == "tool"][-6:])
    meter = meter_for(history, whole_six)
    records = await compact_history(history, meter, client, new_turn=True)
    assert [r.step for r in records] == ["earlier_turns"]  # step 2 was enough
    assert records[0].tokens_after < records[0].tokens_before
    assert server.requests == []

    history.add_assistant("", [ToolCallRequest(id="n", name="read_file", arguments="{}")])
    history.add_tool_result("n", "y" * (whole_six * 4))
    records = await compact_history(history, meter, client)
    assert [r.step for r in records] == ["summary"]
    assert records[0].trigger == "auto"
    assert records[0].tokens_after < records[0].budget < records[0].tokens_before
    assert records[0].summary == SUMMARY_TEXT
    assert records[0].kept == len(history.messages) - 2
    assert records[0].usage is not None
    assert_valid(history.messages)

    server.set_script({"steps": [{"text": "forced"}]})
    history.add_user("compact please")
    history.add_assistant("Compacting.", [])
    records = await compact_history(history, meter, client, force_summary=True)
    assert [(r.step, r.trigger) for r in records] == [("summary", "manual")]
    assert len(server.requests) == 1


# --- the stable prefix across a real turn loop -----------------------------------------------


class CompactingClient:
    """Runs the ladder before every model call, as the wired loop will, and records the
    encoded stable prefix each call sends. The loop's request holds the history's own list,
    which compaction changes in place."""

    def __init__(
        self, inner: ModelClient, history: History, meter: TokenMeter, force_at: int = 0
    ) -> None:
        self.inner = inner
        self.model = inner.model
        self.provider = inner.provider
        self.history = history
        self.meter = meter
        self.force_at = force_at
        self.calls = 0
        self.prefixes: list[list[bytes]] = []
        self.records: list[compact.Compaction] = []

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        self.calls += 1
        self.records += await compact_history(
            self.history,
            self.meter,
            self.inner,
            new_turn=self.calls == 1,
            force_summary=self.calls == self.force_at,
        )
        assert request.messages is self.history.messages
        assert request.tools is not None
        self.prefixes.append(prefix_bytes(self.history, request.tools))
        response = await self.inner.complete(request, callbacks)
        self.meter.record(response.usage)
        return response

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


class NullSink:
    def item_started(self, item: object) -> None:
        pass

    def item_delta(self, item_id: str, delta: str) -> None:
        pass

    def item_completed(self, item: object) -> None:
        pass

    def retrying(self, attempt: int, max_attempts: int, delay: float, reason: str) -> None:
        pass

    def take_queued(self) -> list[QueuedInput]:
        return []

    def open_todos(self) -> list[str]:
        return []


def run_loop(
    client: OpenAIChatClient,
    workspace: Path,
    *,
    budget: int,
    force_at: int = 0,
    request: str = "read big.txt again and again",
) -> tuple[TurnLoop, CompactingClient]:
    registry = ToolRegistry(default_tools())
    history = History(SYSTEM)
    history.add_user(request)
    meter = TokenMeter(history.messages, budget=budget, tools=registry.toolset)
    wrapper = CompactingClient(client, history, meter, force_at=force_at)
    counter = iter(range(1, 10_000))
    loop = TurnLoop(
        model=wrapper,
        tools=registry,
        tool_context=lambda _item: ToolContext(workspace),
        history=history,
        sink=NullSink(),
        new_id=lambda: f"i{next(counter)}",
    )
    return loop, wrapper


def read_step() -> dict[str, object]:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]}


async def test_the_stable_prefix_is_byte_identical_across_every_step(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    (tmp_path / "big.txt").write_text("".join(f"line {i:03} " + "x" * 60 + "\n" for i in range(40)))
    server.set_script({"steps": [*(read_step() for _ in range(12)), {"text": "done"}]})
    loop, wrapper = run_loop(client, tmp_path, budget=10_000)
    with trio.fail_after(20):
        outcome = await loop.run()
    assert outcome.status == "completed"
    assert len(server.requests) == 13
    assert [r.step for r in wrapper.records].count("old_tool_results") >= 1
    assert "summary" not in [r.step for r in wrapper.records]
    assert all(p == wrapper.prefixes[0] for p in wrapper.prefixes)
    first = server.requests[0]
    for request in server.requests:
        assert request["messages"][0] == first["messages"][0]
        assert request["tools"] == first["tools"]
    last = server.requests[-1]["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert sum(is_stub(r) for r in results) == 12 - 6
    assert not any(is_stub(r) for r in results[-6:])
    assert_valid(loop.history.messages)


async def test_a_summary_mid_turn_keeps_the_prefix_and_the_turn_goes_on(
    model: tuple[ModelServer, OpenAIChatClient], tmp_path: Path
) -> None:
    server, client = model
    (tmp_path / "big.txt").write_text("content\n" * 200)
    steps = [read_step(), read_step(), {"text": SUMMARY_TEXT}, read_step(), {"text": "done"}]
    server.set_script({"steps": steps})
    # A request long enough that its summary is shorter: everything after it fits the part
    # kept verbatim, so it is all the summary replaces.
    request = "read big.txt again and again; " + "some background on the task. " * 40
    loop, wrapper = run_loop(client, tmp_path, budget=100_000, force_at=3, request=request)
    with trio.fail_after(20):
        outcome = await loop.run()
    assert outcome.status == "completed"
    assert [r.step for r in wrapper.records] == ["summary"]
    summary_request = server.requests[2]
    assert "tools" not in summary_request
    assert summary_request["messages"][-1]["content"] == SUMMARY_INSTRUCTION
    after = server.requests[3]
    assert after["messages"][0] == server.requests[0]["messages"][0]
    assert after["tools"] == server.requests[0]["tools"]
    assert after["messages"][1]["content"].startswith(SUMMARY_HEADER)
    assert all(p == wrapper.prefixes[0] for p in wrapper.prefixes)
    assert_valid(loop.history.messages)


async def test_a_summary_request_that_must_leave_messages_out_keeps_the_earlier_summary(
    model: tuple[ModelServer, OpenAIChatClient],
) -> None:
    server, client = model
    history = build_history([1_000] * 40)
    history.replace_with_summary("EARLIER SUMMARY", kept=len(history.messages) - 1)
    assert is_summary(history.messages[1])
    summary = await summarise(history, client, keep_recent_tokens=0, request_budget=3_000)
    assert summary is not None
    sent = server.requests[0]["messages"]
    assert "EARLIER SUMMARY" in sent[1]["content"]
    assert sum(len(m.get("content") or "") for m in sent) / 3.5 <= 3_000
    assert len(sent) < 1 + summary.replaced + 1  # the oldest messages were left out
    assert sent[2]["role"] != "tool"
    assert sent[-2]["content"] == result_text(39, 1_000)  # the newest are there
