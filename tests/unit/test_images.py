"""Images in prompts, below the daemon: recognising them by their bytes, making them fit the
model, encoding them in both dialects (through the real HTTP stack, against the scripted
model server, which checks the image blocks as the APIs do), the token estimate, compaction
and the image store."""

import base64
import io
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import msgspec
import pytest
import trio
from PIL import Image

from tether.clients.acp import params as acp_params
from tether.clients.acp.peer import AcpError
from tether.clients.acp.prompt import IMAGES_ONLY_TEXT, turn_params
from tether.daemon.config.live import UserSettings
from tether.daemon.config.settings import Config, ModelConfig, ProviderConfig, parse_config
from tether.daemon.config.vision import takes_images
from tether.daemon.context.budget import message_chars
from tether.daemon.context.compact import summarise
from tether.daemon.context.history import History
from tether.daemon.context.images import (
    MAX_EDGE,
    MAX_SENT_BYTES,
    ImageProblem,
    image_tokens,
    prepare_image,
)
from tether.daemon.providers.anthropic import AnthropicMessagesClient
from tether.daemon.providers.base import (
    Message,
    ModelClient,
    ModelHTTPError,
    ModelRequest,
    QuietCallbacks,
)
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.images import ImageStore
from tether.daemon.sessions.input import read_turn_input
from tether.daemon.sessions.models import ModelPool
from tether.daemon.sessions.provider_choice import provider_named
from tether.protocol.images import MAX_IMAGE_BYTES, gif_frames, image_size, sniff_image
from tether.testing import ModelServer, anthropic_request_problem, openai_request_problem


def encoded(picture: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    picture.save(out, fmt, **options)
    return out.getvalue()


def gradient(width: int, height: int) -> Image.Image:
    """A picture that compresses well (a PNG of it is small whatever its size)."""
    return Image.linear_gradient("L").resize((width, height)).convert("RGB")


def noise(width: int, height: int) -> Image.Image:
    """A picture that does not compress (a PNG of it is about 3 bytes a pixel)."""
    return Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))


def decoded(data: bytes) -> Image.Image:
    picture = Image.open(io.BytesIO(data))
    picture.load()
    return picture


# --- recognising images ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_each_format_is_recognised_by_its_bytes_with_its_size(fmt: str, mime: str) -> None:
    data = encoded(gradient(321, 123), fmt)
    assert sniff_image(data) == mime
    assert image_size(data, mime) == (321, 123)


def test_webp_sizes_of_every_chunk_kind_are_read() -> None:
    lossless = encoded(gradient(77, 55), "WEBP", lossless=True)  # VP8L
    assert image_size(lossless, "image/webp") == (77, 55)
    alpha = encoded(gradient(90, 40).convert("RGBA"), "WEBP")  # VP8X (alpha)
    assert image_size(alpha, "image/webp") == (90, 40)


def test_a_progressive_jpeg_with_exif_has_its_size_read() -> None:
    data = encoded(gradient(640, 480), "JPEG", progressive=True, exif=Image.Exif().tobytes())
    assert image_size(data, "image/jpeg") == (640, 480)


def test_text_and_a_renamed_file_are_not_images() -> None:
    assert sniff_image(b"hello, world") is None
    assert sniff_image(b"%PDF-1.7\n") is None
    assert image_size(b"\x89PNG\r\n\x1a\n", "image/png") is None  # cut short


def test_gif_frames_are_counted() -> None:
    still = encoded(gradient(20, 20).convert("P"), "GIF")
    frames = [gradient(20, 20).convert("P"), noise(20, 20).convert("P")]
    animated = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:])
    assert gif_frames(still) == 1
    assert gif_frames(animated) == 2


# --- making them fit -----------------------------------------------------------------------


def test_an_image_within_the_limits_is_sent_byte_for_byte() -> None:
    data = encoded(gradient(800, 600), "PNG")
    prepared = prepare_image("shot.png", data, "anthropic")
    assert prepared.data == data
    assert (prepared.ref.width, prepared.ref.height, prepared.ref.size) == (800, 600, len(data))
    assert prepared.ref.original_size == 0
    assert prepared.ref.mime_type == "image/png"


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_a_large_image_is_downscaled_to_the_dialects_edge_in_its_format(dialect: str) -> None:
    data = encoded(gradient(4000, 3000), "PNG")
    prepared = prepare_image("big.png", data, dialect)
    edge = MAX_EDGE[dialect]
    assert (prepared.ref.width, prepared.ref.height) == (edge, edge * 3 // 4)
    assert decoded(prepared.data).size == (edge, edge * 3 // 4)
    assert sniff_image(prepared.data) == "image/png" == prepared.ref.mime_type
    assert (prepared.ref.original_width, prepared.ref.original_height) == (4000, 3000)
    assert prepared.ref.original_size == len(data)


def test_an_image_over_the_byte_limit_becomes_a_jpeg_that_fits() -> None:
    data = encoded(noise(1500, 1200), "PNG")
    assert len(data) > MAX_SENT_BYTES
    prepared = prepare_image("noise.png", data, "anthropic")
    assert len(prepared.data) <= MAX_SENT_BYTES
    assert prepared.ref.mime_type == "image/jpeg" == sniff_image(prepared.data)
    assert decoded(prepared.data).size == (prepared.ref.width, prepared.ref.height)


def test_an_animated_gif_goes_as_its_first_frame_in_png() -> None:
    frames = [gradient(60, 40).convert("P"), noise(60, 40).convert("P")]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:])
    prepared = prepare_image("anim.gif", data, "openai")
    assert prepared.ref.mime_type == "image/png"
    assert decoded(prepared.data).size == (60, 40)


def test_what_is_no_image_or_too_large_is_refused_saying_why() -> None:
    with pytest.raises(ImageProblem, match=r"notes\.txt: not a PNG, JPEG, GIF or WebP image"):
        prepare_image("notes.txt", b"just text", "openai")
    too_big = encoded(gradient(10, 10), "PNG") + bytes(MAX_IMAGE_BYTES)
    with pytest.raises(
        ImageProblem, match=r"huge\.png: 10,485,8\d\d bytes, over the 10,485,760 bytes"
    ):
        prepare_image("huge.png", too_big, "openai")
    damaged = b"\x89PNG\r\n\x1a\n" + bytes(30)
    with pytest.raises(ImageProblem, match="damaged png"):
        prepare_image("bad.png", damaged, "openai")


def test_a_picture_of_too_many_pixels_is_refused_before_decoding() -> None:
    header = encoded(gradient(10, 10), "PNG")
    bomb = header[:16] + (20_000).to_bytes(4, "big") + (20_000).to_bytes(4, "big") + header[24:]
    with pytest.raises(ImageProblem, match="20000x20000 pixels, over the 50 megapixels"):
        prepare_image("bomb.png", bomb, "openai")


# --- which models take images --------------------------------------------------------------


def test_which_models_take_images() -> None:
    openai = ProviderConfig(kind="openai")
    assert takes_images(openai, {}, "gpt-4o-mini")
    assert takes_images(openai, {}, "llava:13b")
    assert takes_images(openai, {}, "qwen2.5vl:7b")
    assert not takes_images(openai, {}, "qwen3-coder")
    assert not takes_images(openai, {}, "o3-mini")
    assert takes_images(ProviderConfig(kind="anthropic"), {}, "claude-sonnet-4-5")
    assert takes_images(ProviderConfig(images=True), {}, "my-finetune")
    assert not takes_images(ProviderConfig(kind="anthropic", images=False), {}, "claude")
    models = {"my-vlm": ModelConfig(images=True), "gpt-4o": ModelConfig(images=False)}
    assert takes_images(openai, models, "my-vlm")
    assert not takes_images(openai, models, "gpt-4o")


def test_the_config_file_says_it_per_model(tmp_path: Path) -> None:
    text = '[provider]\nimages = false\n\n[models."llava:13b"]\nimages = true\n'
    config = parse_config(tmp_path / "config.toml", text)
    assert takes_images(config.provider, config.models, "llava:13b")
    assert not takes_images(config.provider, config.models, "gpt-4o")


# --- in the history: tokens, placeholders, compaction ---------------------------------------


def history_with_image(data: bytes, name: str = "shot.png", dialect: str = "openai") -> History:
    prepared = prepare_image(name, data, dialect)
    history = History("system")
    history.image_data[prepared.ref.sha256] = prepared.data
    history.add_user("what is in it?", images=[prepared.ref])
    return history


def test_an_image_counts_in_the_budget_as_its_token_estimate() -> None:
    history = history_with_image(encoded(gradient(1568, 882), "PNG"))
    message = history.messages[1]
    assert image_tokens(1568, 882) == 1600
    assert image_tokens(100, 100) == 85
    assert message_chars(message) == len("what is in it?") + round(1600 * 3.5)


def test_an_image_whose_bytes_are_gone_is_named_in_the_text() -> None:
    prepared = prepare_image("lost.png", encoded(gradient(40, 30), "PNG"), "openai")
    history = History("system")
    history.add_user("look", images=[prepared.ref])
    assert history.messages[1].images == []
    assert history.messages[1].content == "look\n[image lost.png 40x30: no longer stored]"


# --- both dialects over HTTP, checked by the scripted server -----------------------------------


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    with ModelServer({"steps": [{"text": "a picture"}] * 3}) as running:
        yield running


def image_message(data: bytes, name: str = "shot.png", dialect: str = "openai") -> list[Message]:
    return history_with_image(data, name, dialect).messages


async def test_openai_sends_a_data_url_part_after_the_text(server: ModelServer) -> None:
    data = encoded(gradient(300, 200), "JPEG")
    client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
    try:
        with trio.fail_after(10):
            response = await client.complete(
                ModelRequest(messages=image_message(data, "shot.jpg")), QuietCallbacks()
            )
    finally:
        await client.aclose()
    assert response.text == "a picture"
    content = server.requests[0]["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "what is in it?"}
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.removeprefix("data:image/jpeg;base64,")) == data


async def test_anthropic_sends_a_base64_image_block_before_the_text(server: ModelServer) -> None:
    data = encoded(gradient(4000, 2000), "PNG")
    client = AnthropicMessagesClient(base_url=server.url, model="claude-sonnet-4-5")
    try:
        with trio.fail_after(10):
            messages = image_message(data, dialect="anthropic")
            await client.complete(ModelRequest(messages=messages), QuietCallbacks())
    finally:
        await client.aclose()
    blocks = server.requests[0]["messages"][0]["content"]
    assert blocks[0]["type"] == "image"
    source = blocks[0]["source"]
    assert (source["type"], source["media_type"]) == ("base64", "image/png")
    assert decoded(base64.b64decode(source["data"])).size == (1568, 784)  # downscaled
    assert blocks[1]["type"] == "text"
    assert blocks[1]["text"] == "what is in it?"


async def test_text_tool_mode_keeps_the_images_of_merged_user_messages(
    server: ModelServer,
) -> None:
    data = encoded(gradient(64, 64), "PNG")
    client = OpenAIChatClient(base_url=server.base_url, model="llava", tool_mode="text")
    try:
        with trio.fail_after(10):
            await client.complete(ModelRequest(messages=image_message(data)), QuietCallbacks())
    finally:
        await client.aclose()
    content = server.requests[0]["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "what is in it?"}
    assert content[1]["image_url"]["url"] == (
        "data:image/png;base64," + base64.b64encode(data).decode()
    )


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_a_model_that_takes_no_images_is_told_their_names(
    server: ModelServer, dialect: str
) -> None:
    data = encoded(gradient(64, 48), "PNG")
    if dialect == "openai":
        client = OpenAIChatClient(base_url=server.base_url, model="qwen3-coder", images=False)
    else:
        client = AnthropicMessagesClient(base_url=server.url, model="claude", images=False)
    messages = image_message(data)
    try:
        with trio.fail_after(10):
            await client.complete(ModelRequest(messages=messages), QuietCallbacks())
    finally:
        await client.aclose()
    body = json.dumps(server.requests[0])
    assert "base64" not in body
    assert "[image shot.png 64x48: not sent: this model takes no images]" in body


async def test_an_image_the_history_keeps_goes_with_every_later_request(
    server: ModelServer,
) -> None:
    data = encoded(gradient(50, 50), "PNG")
    history = history_with_image(data)
    client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
    try:
        with trio.fail_after(10):
            for follow_up in ("and now?", "and then?"):
                response = await client.complete(
                    ModelRequest(messages=history.messages), QuietCallbacks()
                )
                history.add_assistant(response.text, [])
                history.add_user(follow_up)
    finally:
        await client.aclose()
    for request in server.requests:
        url = request["messages"][1]["content"][1]["image_url"]["url"]
        assert base64.b64decode(url.split(",", 1)[1]) == data


async def test_a_summary_is_asked_with_a_placeholder_and_drops_the_image(
    server: ModelServer,
) -> None:
    server.set_script({"steps": [{"text": "The user showed a screenshot of an error."}]})
    history = history_with_image(encoded(gradient(400, 300), "PNG"))
    for index in range(6):
        history.add_assistant("x" * 2_000 + str(index), [])
        history.add_user("go on " + "y" * 2_000)
    client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
    try:
        with trio.fail_after(10):
            summary = await summarise(history, client, keep_recent_tokens=600)
    finally:
        await client.aclose()
    assert summary is not None
    asked = json.dumps(server.requests[0])
    assert "image_url" not in asked
    assert "[image shot.png 400x300: attached here]" in asked
    assert not any(message.images for message in history.messages)


async def test_the_server_refuses_malformed_image_blocks_like_the_apis(
    server: ModelServer,
) -> None:
    png = base64.b64encode(encoded(gradient(8, 8), "PNG")).decode()
    bad_openai = {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%"}}
                ],
            }
        ],
    }
    assert openai_request_problem(bad_openai) == (
        "messages[0].content[0].image_url: invalid base64 image data"
    )
    mislabelled = {"type": "base64", "media_type": "image/jpeg", "data": png}
    bad_anthropic = {
        "model": "claude",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "image", "source": mislabelled}]}],
    }
    problem = anthropic_request_problem(bad_anthropic)
    assert problem is not None
    assert "does not match the provided media type image/jpeg" in problem
    no_source = {**bad_anthropic, "messages": [{"role": "user", "content": [{"type": "image"}]}]}
    assert (
        anthropic_request_problem(no_source)
        == "messages.0.content.0.source: Field required (an object)"
    )
    ok = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}],
    }
    assert openai_request_problem({"messages": [ok]}) is None
    # Over HTTP, a refused request is a 400 the client reports, and no step is spent.
    client = OpenAIChatClient(base_url=server.base_url, model="gpt-4o")
    bad = Message(role="user", content="x")
    bad.cache["openai"] = msgspec.Raw(json.dumps(bad_openai["messages"][0]).encode())
    server.set_script({"steps": [{"text": "first step"}]})
    try:
        with trio.fail_after(10):
            with pytest.raises(ModelHTTPError, match="invalid base64 image data"):
                await client.complete(ModelRequest(messages=[bad]), QuietCallbacks())
            good = Message(role="user", content="hello")
            response = await client.complete(ModelRequest(messages=[good]), QuietCallbacks())
    finally:
        await client.aclose()
    assert response.text == "first step"


# --- the image store -----------------------------------------------------------------------


def test_the_store_keeps_images_owner_only_and_forgets_a_deleted_session(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    store.save("s_1", "abc", b"bytes")
    store.save("s_1", "abc", b"bytes")  # kept once
    folder = tmp_path / "images" / "s_1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "abc").stat().st_mode) == 0o600
    assert store.load("s_1", ["abc", "gone"]) == {"abc": b"bytes"}
    assert os.listdir(folder) == ["abc"]  # no temporary file left
    store.delete_session("s_1")
    assert not folder.exists()
    with pytest.raises(ValueError, match="not a session id"):
        store.save("../x", "abc", b"")


# --- the model pool ------------------------------------------------------------------------


class _PooledClient:
    provider = "openai"

    def __init__(self, settings: ProviderConfig, closed: list[str]) -> None:
        self.model = settings.model
        self._closed = closed

    async def complete(self, request: ModelRequest, callbacks: object) -> object:
        raise NotImplementedError

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        self._closed.append(self.model)


async def test_models_that_differ_in_taking_images_keep_their_clients(tmp_path: Path) -> None:
    """A session's model and its subagents' (one with images, one without) are the same
    settings: leasing one does not make the other's client stale and close it."""
    closed: list[str] = []
    pool = ModelPool(
        UserSettings(tmp_path / "config.toml", {}),
        lambda settings: cast(ModelClient, _PooledClient(settings, closed)),
    )
    config = Config()
    try:
        for model in ("gpt-4o", "qwen3-coder", "gpt-4o"):
            async with pool.lease(provider_named(config, model)) as client:
                assert client.model == model
        assert closed == []
        assert pool.open_count == 2
    finally:
        await pool.aclose()


# --- the ACP agent -------------------------------------------------------------------------


def test_an_acp_image_block_becomes_an_image_of_the_turn() -> None:
    data = encoded(gradient(16, 9), "PNG")
    prompt = msgspec.json.decode(
        json.dumps(
            {
                "sessionId": "s",
                "prompt": [
                    {"type": "text", "text": "what is it?"},
                    {
                        "type": "image",
                        "mimeType": "image/png",
                        "data": base64.b64encode(data).decode(),
                        "uri": "file:///home/me/shot%201.png",
                    },
                    {
                        "type": "image",
                        "mimeType": "image/png",
                        "data": base64.b64encode(data).decode(),
                    },
                ],
            }
        ),
        type=acp_params.Prompt,
    )
    params = turn_params("s", prompt.prompt)
    assert params.text == "what is it?"
    assert [(i.name, i.mime_type, i.data) for i in params.images] == [
        ("shot 1.png", "image/png", data),
        ("image 2", "image/png", data),
    ]
    alone = turn_params(
        "s", [acp_params.Image(data=base64.b64encode(data).decode(), mime_type="image/png")]
    )
    assert (alone.text, len(alone.images)) == (IMAGES_ONLY_TEXT, 1)  # a turn needs words
    bad = acp_params.Image(data="%%", mime_type="image/png")
    with pytest.raises(AcpError, match="not base64"):
        turn_params("s", [bad])


def test_a_downscaled_photo_is_turned_upright_by_its_exif_orientation() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90° clockwise: the camera held upright
    data = encoded(noise(2400, 1200), "JPEG", exif=exif.tobytes(), quality=95)
    prepared = prepare_image("photo.jpg", data, "anthropic")
    assert (prepared.ref.original_width, prepared.ref.original_height) == (2400, 1200)
    assert (prepared.ref.width, prepared.ref.height) == (784, 1568)


# --- mentions ------------------------------------------------------------------------------


async def test_a_mentioned_image_is_sent_as_one_and_a_bad_one_is_a_problem(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "project"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "shot.webp").write_bytes(encoded(gradient(30, 20), "WEBP"))
    (workspace / "named.png").write_text("a text file with an image's name\n")
    (workspace / "huge.png").write_bytes(encoded(gradient(8, 8), "PNG") + bytes(MAX_IMAGE_BYTES))
    huge = (workspace / "huge.png").stat().st_size
    (workspace / "blob.bin").write_bytes(b"\x00\x01binary")
    with trio.fail_after(20):
        sent = await read_turn_input(
            workspace,
            editor=None,
            mentions=["docs/shot.webp", "named.png", "huge.png", "blob.bin"],
            dialect="anthropic",
        )
    assert [(i.ref.name, i.ref.mime_type) for i in sent.images] == [
        ("docs/shot.webp", "image/webp")
    ]
    assert "a text file with an image's name" in sent.context  # read as text, by its bytes
    assert list(sent.problems) == [
        f"huge.png: {huge:,} bytes, over the 10,485,760 bytes an image may have; not attached",
        "blob.bin: a binary file; not attached",
    ]
