"""Images an MCP tool returns, through real turns: the real sessions over a real store, a real
stdio MCP server (tests/mcp/tiny_server.py's `look`), the scripted model over real HTTP in
both dialects, its request checker refusing what the APIs would. The image goes in the
Anthropic `tool_result`, in one OpenAI user message after the step's tool messages, as a line
alone to a model that takes none; a reloaded session sends it again; a large one is
downscaled; a damaged, mislabelled or surplus one stays a line saying why."""

import base64
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
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.config import McpServerConfig
from tether.daemon.mcp.pool import McpPool
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import ModelClient
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.items import AgentMessage, ToolCall
from tether.testing import ModelServer

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
