"""Images an MCP tool returns, through real turns: the real sessions over a real store, a real
stdio MCP server (tests/mcp/tiny_server.py's `look`), the scripted model over real HTTP in
both dialects, its request checker refusing what the APIs would. The image goes in the
Anthropic `tool_result`, in one OpenAI user message after the step's tool messages, as a line
alone to a model that takes none; a reloaded session sends it again; a large one is
downscaled; a damaged, mislabelled or surplus one stays a line saying why."""

import base64
import hashlib
import io
import json
import sys
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

import pytest
import trio
from PIL import Image

from tests.inprocess import running_sessions
from tests.unit.test_mcp_pool import TINY
from tests.unit.test_skills_turn import JSON, call, tool_results, turn
from tether.daemon.config.settings import Config, PermissionsConfig
from tether.daemon.context.budget import message_chars
from tether.daemon.context.compact import summarise
from tether.daemon.context.history import History
from tether.daemon.context.images import image_part, image_tokens
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.config import McpServerConfig
from tether.daemon.mcp.content import McpImage, result_parts
from tether.daemon.mcp.pool import McpPool
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.anthropic import encode_blocks as anthropic_encode
from tether.daemon.providers.base import ModelClient, ToolCallRequest
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.providers.openai import encode_messages as openai_encode
from tether.daemon.providers.stream import CHARS_PER_TOKEN
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.items import AgentMessage, AnyItem, ImageRef, ToolCall, UserMessage
from tether.testing import ModelServer, anthropic_request_problem, openai_request_problem

Client = Callable[[ModelServer], ModelClient]


def gpt4o(server: ModelServer) -> ModelClient:
    return OpenAIChatClient(base_url=server.base_url, model="gpt-4o")


def claude(server: ModelServer) -> ModelClient:
    return AnthropicMessagesClient(base_url=server.url, model="claude-sonnet-4-5")


def text_only(server: ModelServer) -> ModelClient:
    return OpenAIChatClient(base_url=server.base_url, model="qwen3-coder", images=False)


class Places:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.workspace = tmp_path / "project"
        self.workspace.mkdir()
        self.store = Store(tmp_path / "tether.sqlite3")

    def picture(self, width: int, height: int, name: str = "shot.png") -> tuple[Path, bytes]:
        out = io.BytesIO()
        Image.linear_gradient("L").resize((width, height)).convert("RGB").save(out, "PNG")
        path = self.root / name
        path.write_bytes(out.getvalue())
        return path, out.getvalue()


@pytest.fixture
def places(tmp_path: Path) -> Iterator[Places]:
    found = Places(tmp_path)
    found.store.open()
    yield found
    found.store.close()


@asynccontextmanager
async def daemon_parts(
    places: Places, server: ModelServer, client: Client = gpt4o
) -> AsyncGenerator[Sessions]:
    servers = {"tiny": McpServerConfig(command=sys.executable, args=[str(TINY)])}
    config = Config(mcp_servers=servers, permissions=PermissionsConfig(allow=["mcp__tiny__*"]))
    model = client(server)
    mcp = McpPool(places.workspace, approvals=ServerApprovals(places.root / "approvals.json"))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(mcp.serve)
            async with running_sessions(
                places.store, places.workspace, server, models=FixedModel(model, config), mcp=mcp
            ) as sessions:
                yield sessions
            nursery.cancel_scope.cancel()
    finally:
        await model.aclose()


async def looked(
    places: Places, client: Client, **arguments: object
) -> tuple[ModelServer, Session]:
    """A turn whose model calls `look` with `arguments`, then answers: the server (its
    requests) and the session."""
    script = {"steps": [call("mcp__tiny__look", **arguments), {"text": "seen"}]}
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(places, server, client) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
    return server, session


def the_call(session: Session) -> ToolCall:
    return next(item for item in session.items() if isinstance(item, ToolCall))


def tool_result_block(request: JSON) -> JSON:
    """The one `tool_result` block of an Anthropic request."""
    (found,) = [
        cast("JSON", block)
        for message in request["messages"]
        for block in message["content"]
        if isinstance(block, dict) and cast("JSON", block)["type"] == "tool_result"
    ]
    return found


def answered(session: Session) -> str:
    """The model's last text: the scripted one only when no request was refused (the
    scripted server refuses what the API would, and the turn fails)."""
    return [item for item in session.items() if isinstance(item, AgentMessage)][-1].text


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def size_of(data: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(data)).size


async def test_an_anthropic_model_gets_the_image_in_the_tool_result(places: Places) -> None:
    path, data = places.picture(32, 24)
    server, session = await looked(places, claude, path=str(path))
    result = tool_result_block(server.requests[-1])
    text, image = result["content"]
    assert text["type"] == "text"
    assert text["text"].splitlines()[:2] == [
        "here",
        f"[image look-1.png 32x24, {len(data)} B: returned by the tool]",
    ]
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == data
    (ref,) = the_call(session).images
    assert (ref.name, ref.width, ref.height, ref.size) == ("look-1.png", 32, 24, len(data))
    assert answered(session) == "seen"


async def test_an_openai_model_gets_the_images_after_the_tool_messages(places: Places) -> None:
    path, data = places.picture(20, 10)
    script = {
        "steps": [
            {
                "tool_calls": [
                    {"name": "mcp__tiny__look", "arguments": {"path": str(path)}},
                    {"name": "mcp__tiny__echo", "arguments": {"text": "hi"}},
                    {"name": "mcp__tiny__look", "arguments": {"path": str(path), "count": 2}},
                ]
            },
            {"text": "seen"},
        ]
    }
    with trio.fail_after(30), ModelServer(script) as server:
        async with daemon_parts(places, server, gpt4o) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
    messages = server.requests[-1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
    first, _, third = (m["tool_call_id"] for m in messages[3:6])
    assert all(isinstance(m["content"], str) for m in messages[3:6])
    parts = messages[6]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "text", "image_url", "image_url"]
    assert parts[0]["text"] == f"The images returned by tool call {first} (mcp__tiny__look):"
    assert parts[2]["text"] == f"The images returned by tool call {third} (mcp__tiny__look):"
    assert {p["image_url"]["url"] for p in parts if p["type"] == "image_url"} == {data_url(data)}
    assert answered(session) == "seen"
    assert [len(item.images) for item in session.items() if isinstance(item, ToolCall)] == [
        1,
        0,
        2,
    ]


async def test_a_model_that_takes_no_images_gets_the_lines_alone(places: Places) -> None:
    path, _ = places.picture(32, 24)
    server, session = await looked(places, text_only, path=str(path))
    assert answered(session) == "seen"
    body = json.dumps(server.requests[-1])
    assert "image_url" not in body
    (result,) = tool_results(server.requests[-1])
    assert "[image look-1.png 32x24" in result
    assert "[image look-1.png 32x24: not sent: this model takes no images]" in result


async def test_a_reloaded_session_still_sends_the_image(places: Places) -> None:
    path, data = places.picture(16, 16)
    _, session = await looked(places, gpt4o, path=str(path))
    path.unlink()  # only the session's own copy is left
    with trio.fail_after(30), ModelServer({"steps": [{"text": "still there"}]}) as server:
        async with daemon_parts(places, server, gpt4o) as sessions:
            reloaded = await sessions.get(session.id)
            assert the_call(reloaded).images == the_call(session).images
            await turn(sessions, reloaded, "and now?")
    messages = server.requests[-1]["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "user",
    ]
    assert messages[4]["content"][1]["image_url"]["url"] == data_url(data)
    assert answered(reloaded) == "still there"


async def test_a_large_image_is_downscaled_as_a_prompt_image_is(places: Places) -> None:
    path, _ = places.picture(3000, 1000)
    server, session = await looked(places, claude, path=str(path))
    (ref,) = the_call(session).images
    assert (ref.width, ref.height) == (1568, 523)
    assert (ref.original_width, ref.original_height) == (3000, 1000)
    result = tool_result_block(server.requests[-1])
    sent = base64.b64decode(result["content"][1]["source"]["data"])
    assert size_of(sent) == (1568, 523)
    assert "downscaled from 3000x1000" in result["content"][0]["text"]


async def test_what_cannot_be_sent_stays_a_line_saying_why(places: Places) -> None:
    path, _ = places.picture(8, 8)
    not_png = base64.b64encode(b"plain text, not a picture").decode()
    script = {
        "steps": [
            call("mcp__tiny__look"),  # a PNG signature and nothing else
            call("mcp__tiny__look", data=not_png),
            call("mcp__tiny__look", path=str(path), mimeType="image/svg+xml"),
            call("mcp__tiny__look", data="%%%not base64%%%"),
            call("mcp__tiny__look", path=str(path), count=6),
            {"text": "seen"},
        ]
    }
    with trio.fail_after(60), ModelServer(script) as server:
        async with daemon_parts(places, server, gpt4o) as sessions:
            session = await sessions.create()
            await turn(sessions, session)
    damaged, mislabelled, svg, garbled, many = (
        result.splitlines()[1:-1] for result in tool_results(server.requests[-1])
    )
    assert damaged == [
        "[image (image/png, 8 bytes) returned by the tool: not shown, look-1.png: a damaged"
        " png (no size)]"
    ]
    assert mislabelled == [
        "[image (image/png, 25 bytes) returned by the tool: not shown, look-1.png: not a PNG,"
        " JPEG, GIF or WebP image]"
    ]
    assert svg[0].startswith("[image (image/svg+xml, ")
    assert svg[0].endswith("not shown, tether sends only PNG, JPEG, GIF and WebP images]")
    assert garbled[0].endswith("not shown, its data is not valid base64]")
    assert [line.split(" ")[1] for line in many[:4]] == [f"look-{n}.png" for n in range(1, 5)]
    assert (
        many[4:]
        == [
            many[4].split(": not shown")[0]
            + ": not shown, only the first 4 images of a result are sent]"
        ]
        * 2
    )
    counts = [len(item.images) for item in session.items() if isinstance(item, ToolCall)]
    assert counts == [0, 0, 0, 0, 4]
    assert answered(session) == "seen"


# --- the pieces: history, encoders, budget, summary, the request checker ----------------------


def tool_image_ref(data: bytes) -> ImageRef:
    width, height = size_of(data)
    return ImageRef(
        name="look-1.png",
        mime_type="image/png",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        width=width,
        height=height,
    )


def history_with_tool_image(data: bytes) -> History:
    """A conversation whose one tool call returned the image `data` (a PNG)."""
    ref = tool_image_ref(data)
    history = History("system")
    history.add_user("look")
    history.add_assistant("", [ToolCallRequest(id="call_1", name="mcp__tiny__look", arguments="")])
    history.image_data[ref.sha256] = data
    history.add_tool_result("call_1", "here\n[image look-1.png: returned by the tool]", [ref])
    history.add_assistant("a gradient", [])
    history.add_user("and now?")
    return history


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.linear_gradient("L").resize((width, height)).save(out, "PNG")
    return out.getvalue()


def test_a_rebuilt_history_carries_the_tool_images_it_still_has() -> None:
    data = png(40, 30)
    call = ToolCall(
        id="i1",
        call_id="call_1",
        tool="mcp__tiny__look",
        arguments="",
        status="completed",
        output="here",
        step=1,
        images=[tool_image_ref(data)],
    )
    items: list[AnyItem] = [UserMessage(id="u", text="look"), call]
    kept = History("system")
    kept.image_data[call.images[0].sha256] = data
    kept.rebuild(items)
    assert kept.messages[3].images == [image_part(call.images[0], data)]
    lost = History("system")
    lost.rebuild(items)
    assert lost.messages[3].images == []
    assert lost.messages[3].content == "here\n[image look-1.png 40x30: no longer stored]"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_the_cached_encodings_of_a_tool_result_tell_images_on_from_off(dialect: str) -> None:
    message = history_with_tool_image(png(8, 8)).messages[3]
    if dialect == "openai":
        with_images = openai_encode([message], images=True)
        without = openai_encode([message], images=False)
        assert len(with_images) == 2  # the tool message, then the user message with the image
        assert len(without) == 1
        assert b"not sent: this model takes no images" in bytes(without[0])
    else:
        with_images = [anthropic_encode(message, images=True)]
        without = [anthropic_encode(message, images=False)]
        assert b'"type":"image"' in bytes(with_images[0])
        assert b'"type":"image"' not in bytes(without[0])
        assert b"not sent: this model takes no images" in bytes(without[0])
    assert len(message.cache) >= 2  # one key each way, neither overwriting the other
    again = (
        openai_encode([message], images=True)
        if dialect == "openai"
        else [anthropic_encode(message, images=True)]
    )
    assert [bytes(raw) for raw in again] == [bytes(raw) for raw in with_images]


def test_a_tool_image_counts_in_the_budget_as_a_prompt_image() -> None:
    history = history_with_tool_image(png(1000, 750))
    tool, assistant = history.messages[3], history.messages[4]
    assert message_chars(tool) == len(tool.content) + round(
        image_tokens(1000, 750) * CHARS_PER_TOKEN
    )
    assert message_chars(assistant) == len("a gradient")


async def test_a_summary_is_told_the_tool_image_by_name_and_keeps_the_call_answered() -> None:
    history = history_with_tool_image(png(20, 20))
    with ModelServer({"steps": [{"text": "the user asked for a look; it was a gradient"}]}) as (
        server
    ):
        client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
        try:
            with trio.fail_after(10):
                summary = await summarise(history, client, keep_recent_tokens=0)
        finally:
            await client.aclose()
    assert summary is not None
    (request,) = server.requests
    tool = next(m for m in request["messages"] if m["role"] == "tool")
    assert tool["tool_call_id"] == "call_1"
    assert "[image look-1.png 20x20: attached here]" in tool["content"]
    assert "image_url" not in json.dumps(request)


async def test_a_long_tool_result_cut_for_the_summary_still_names_its_image() -> None:
    """A result cut to fit the summary request keeps its images' names."""
    data = png(20, 20)
    ref = tool_image_ref(data)
    history = History("system")
    history.add_user("look")
    history.add_assistant("", [ToolCallRequest(id="call_1", name="mcp__tiny__look", arguments="")])
    history.image_data[ref.sha256] = data
    history.add_tool_result("call_1", "x" * 60_000, [ref])
    history.add_assistant("a gradient", [])
    history.add_user("and now?")
    with ModelServer({"steps": [{"text": "a look at a gradient"}]}) as server:
        client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
        try:
            with trio.fail_after(10):
                await summarise(history, client, keep_recent_tokens=0, request_budget=8_000)
        finally:
            await client.aclose()
    (request,) = server.requests
    tool = next(m for m in request["messages"] if m["role"] == "tool")
    assert len(tool["content"]) < 60_000  # it was cut
    assert "[image look-1.png 20x20: attached here]" in tool["content"]


def openai_chat(*messages: JSON) -> JSON:
    return {"model": "m", "messages": [{"role": "system", "content": "s"}, *messages]}


ASKED: JSON = {
    "role": "assistant",
    "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
    ],
}
PICTURE: JSON = {"type": "image_url", "image_url": {"url": data_url(png(2, 2))}}


def test_the_request_checker_takes_images_only_after_every_tool_message() -> None:
    user: JSON = {"role": "user", "content": "go"}
    answer_a: JSON = {"role": "tool", "tool_call_id": "a", "content": "x"}
    answer_b: JSON = {"role": "tool", "tool_call_id": "b", "content": "y"}
    images: JSON = {"role": "user", "content": [{"type": "text", "text": "from a"}, PICTURE]}
    assert openai_request_problem(openai_chat(user, ASKED, answer_a, answer_b, images)) is None
    between = openai_request_problem(openai_chat(user, ASKED, answer_a, images, answer_b))
    assert between is not None
    assert "did not have response messages: b" in between
    stray = openai_request_problem(openai_chat(user, answer_a))
    assert stray is not None
    assert "must be a response to a preceding message with 'tool_calls'" in stray
    in_tool = {"role": "tool", "tool_call_id": "b", "content": [PICTURE]}
    problem = openai_request_problem(openai_chat(user, ASKED, answer_a, in_tool))
    assert problem == "messages[4].content: a tool message takes text parts only"


def test_the_request_checker_reads_the_content_of_a_tool_result() -> None:
    def picture(data: str) -> JSON:
        source = {"type": "base64", "media_type": "image/png", "data": data}
        return {"type": "image", "source": source}

    def body(content: object) -> JSON:
        return {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "a", "content": content}],
                },
            ],
        }

    good = picture(base64.b64encode(png(2, 2)).decode())
    assert anthropic_request_problem(body([{"type": "text", "text": "x"}, good])) is None
    assert anthropic_request_problem(body("just text")) is None
    empty = anthropic_request_problem(body([picture("")]))
    assert empty == (
        "messages.2.content.0.content.0.source: image data must be a non-empty base64 string"
    )
    other = anthropic_request_problem(body([{"type": "document"}]))
    assert other is not None
    assert "holds only text and image blocks" in other


def test_image_blocks_become_images_named_after_the_tool_in_their_place() -> None:
    jpeg = base64.b64encode(b"\xff\xd8\xff pretend").decode()
    parts, is_error = result_parts(
        {
            "content": [
                {"type": "text", "text": "two shots"},
                {"type": "image", "data": jpeg, "mimeType": "image/jpg"},
                {"type": "text", "text": "and"},
                {"type": "image", "data": f"{jpeg[:8]}\n{jpeg[8:]}", "mimeType": "image/webp"},
            ]
        },
        "shoot",
    )
    assert not is_error
    assert parts == [
        "two shots",
        McpImage(name="shoot-1.jpg", mime_type="image/jpeg", data=b"\xff\xd8\xff pretend"),
        "and",
        McpImage(name="shoot-2.webp", mime_type="image/webp", data=b"\xff\xd8\xff pretend"),
    ]
