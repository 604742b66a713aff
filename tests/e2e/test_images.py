"""Images in prompts through the real daemon and CLI: `--image` and `@shot.png`, the request
bodies the scripted model server records in both dialects, the image kept in the history for
later steps, turns and a restarted daemon, a model that takes no images refused before any
call, and what events and snapshots carry."""

import base64
import io
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.support import (
    Home,
    attach,
    cli,
    collect_until_turn_end,
    create_session,
    raw_call,
    start_daemon,
    start_turn,
)
from tether.clients.core.rpc import CallError, Client
from tether.protocol.errors import ErrorCode
from tether.protocol.items import UserMessage
from tether.protocol.jsonrpc import request_frame
from tether.protocol.methods import (
    IMAGE_READ,
    MODELS_LIST,
    SESSION_CONFIGURE,
    SESSION_DELETE,
    SESSION_LIST,
    SESSION_READ,
    TURN_START,
    ImageInput,
    ImageReadParams,
    InitializeParams,
    SessionConfigureParams,
    SessionDeleteParams,
    SessionRef,
    TurnStartParams,
)
from tether.testing import ModelServer


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.linear_gradient("L").resize((width, height)).convert("RGB").save(out, "PNG")
    return out.getvalue()


def openai_images(request: dict[str, Any]) -> list[bytes]:
    """The images of a chat completions request, decoded from their data URLs."""
    found: list[bytes] = []
    messages: list[dict[str, Any]] = request["messages"]
    for message in messages:
        content: str | list[dict[str, Any]] | None = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part["type"] == "image_url":
                    url: str = part["image_url"]["url"]
                    assert url.startswith("data:image/png;base64,")
                    found.append(base64.b64decode(url.removeprefix("data:image/png;base64,")))
    return found


def images_dir(home: Home, workspace: Path) -> Path:
    return home.database_path(workspace).parent / "images"


def test_run_with_image_sends_it_at_every_step_and_after_a_restart(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    home.env["TETHER_MODEL"] = "gpt-4o"
    shot = tmp_path / "shot.png"
    shot.write_bytes(png(800, 600))
    read = {"name": "read_file", "arguments": {"path": "README.md"}}
    model_server.set_script(
        {"steps": [{"tool_calls": [read]}, {"text": "a gradient"}, {"text": "still one"}]}
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "--image", str(shot), "what is this?")
        assert ran.returncode == 0, ran.stderr
        assert "[image shot.png 800\N{MULTIPLICATION SIGN}600, " in ran.stderr
        assert "a gradient" in ran.stdout
        first, second = model_server.requests[:2]
        assert openai_images(first) == [shot.read_bytes()]
        assert openai_images(second) == [shot.read_bytes()]  # the next step carries it too
        assert first["messages"][1]["content"][0]["text"].endswith("what is this?")
        with daemon.client() as client:
            read = client.call(SESSION_READ, SessionRef(session_id=_only_session(client)))
            snapshot = read.snapshot
    finally:
        daemon.stop()
    # The events carry the image's description, never its bytes.
    items = [item for turn in snapshot.turns for item in turn.items]
    message = next(item for item in items if isinstance(item, UserMessage))
    (image,) = message.images
    assert (image.name, image.mime_type, image.width, image.height) == (
        "shot.png",
        "image/png",
        800,
        600,
    )
    assert image.size == len(shot.read_bytes())
    database = home.database_path(workspace).read_bytes()
    assert base64.b64encode(shot.read_bytes())[:200] not in database
    kept = images_dir(home, workspace) / snapshot.session.id / image.sha256
    assert kept.read_bytes() == shot.read_bytes()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700

    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        again = cli(
            home, "run", "-w", str(workspace), "-s", snapshot.session.id, "and the colours?"
        )
        assert again.returncode == 0, again.stderr
        assert openai_images(model_server.requests[2]) == [shot.read_bytes()]
        with restarted.client() as client:
            client.call(SESSION_DELETE, SessionDeleteParams(session_id=snapshot.session.id))
        assert not kept.parent.exists()
    finally:
        restarted.stop()


def _only_session(client: Client) -> str:
    (info,) = client.call(SESSION_LIST).sessions
    return info.id


def test_a_model_that_takes_no_images_is_refused_before_any_call(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(png(64, 64))
    (workspace / "diagram.png").write_bytes(png(32, 32))
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "--image", str(shot), "describe it")
        assert ran.returncode != 0
        assert "the model scripted takes no images" in ran.stderr
        assert '[models."scripted"] images = true' in ran.stderr
        mentioned = cli(home, "run", "-w", str(workspace), "what does @diagram.png show?")
        assert mentioned.returncode != 0
        assert "takes no images" in mentioned.stderr
        with daemon.client() as client:
            session_id = create_session(client)
            with pytest.raises(CallError) as refused:
                client.call(
                    TURN_START,
                    TurnStartParams(
                        session_id=session_id,
                        text="look",
                        images=[ImageInput(name="shot.png", data=shot.read_bytes())],
                    ),
                )
            assert refused.value.code == ErrorCode.IMAGES_UNSUPPORTED
            # A session on a vision model switching back to the configured one ("") is
            # checked against the configured one.
            client.call(
                SESSION_CONFIGURE, SessionConfigureParams(session_id=session_id, model="gpt-4o")
            )
            with pytest.raises(CallError) as switched:
                client.call(
                    TURN_START,
                    TurnStartParams(
                        session_id=session_id,
                        text="look",
                        model="",
                        images=[ImageInput(name="shot.png", data=shot.read_bytes())],
                    ),
                )
            assert switched.value.code == ErrorCode.IMAGES_UNSUPPORTED
            listed = client.call(MODELS_LIST)
            assert [m.images for m in listed.models if m.id == "scripted"] == [False]
    finally:
        daemon.stop()
    assert model_server.requests == []


def test_bad_images_get_a_clear_error_and_nothing_is_sent(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    home.env["TETHER_MODEL"] = "gpt-4o"
    notes = tmp_path / "notes.png"
    notes.write_text("not really a picture\n")
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "--image", str(notes), "what is this?")
        assert ran.returncode == 2
        assert "notes.png: not a PNG, JPEG, GIF or WebP image" in ran.stderr
        gone = str(tmp_path / "gone.png")
        missing = cli(home, "run", "-w", str(workspace), "--image", gone, "x")
        assert missing.returncode == 2
        assert "gone.png: cannot read it" in missing.stderr
        with daemon.client() as client:
            session_id = create_session(client)
            with pytest.raises(CallError) as refused:
                client.call(
                    TURN_START,
                    TurnStartParams(
                        session_id=session_id,
                        text="look",
                        images=[ImageInput(name="x.png", data=b"GIF89a")],
                    ),
                )
            assert refused.value.code == ErrorCode.INVALID_PARAMS
            assert "images[0]: x.png: a damaged gif" in refused.value.message
            # Base64 that is not base64 is refused by the params' own decoding.
            ws = daemon.raw()
            raw_call(ws, request_frame("i", "initialize", InitializeParams(client_name="raw")))
            params = {
                "sessionId": session_id,
                "text": "look",
                "images": [{"name": "y", "data": "%"}],
            }
            answer = raw_call(
                ws,
                json.dumps(
                    {"jsonrpc": "2.0", "id": "bad", "method": "turn/start", "params": params}
                ),
            )
            ws.close()
            assert answer["error"]["code"] == ErrorCode.INVALID_PARAMS
            assert "images[0].data" in answer["error"]["message"]
    finally:
        daemon.stop()
    assert model_server.requests == []


def test_a_mentioned_image_goes_as_an_anthropic_image_block(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    home.env["TETHER_BASE_URL"] = model_server.url
    home.env["TETHER_PROVIDER"] = "anthropic"
    home.env["ANTHROPIC_API_KEY"] = "sk-ant-test"
    home.env["TETHER_MODEL"] = "claude-sonnet-4-5"
    big = png(3200, 1600)
    (workspace / "docs").mkdir()
    (workspace / "docs" / "shot.png").write_bytes(big)
    model_server.set_script({"steps": [{"text": "a wide gradient"}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "what does @docs/shot.png show?")
        assert ran.returncode == 0, ran.stderr
        times = "\N{MULTIPLICATION SIGN}"
        assert f"[image docs/shot.png 1568{times}784, " in ran.stderr
        assert f"downscaled from 3200{times}1600" in ran.stderr
    finally:
        daemon.stop()
    (request,) = model_server.requests
    blocks = request["messages"][0]["content"]
    image = next(block for block in blocks if block["type"] == "image")
    assert image["source"]["media_type"] == "image/png"
    sent = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert sent.size == (1568, 784)
    text = " ".join(block["text"] for block in blocks if block["type"] == "text")
    assert "binary" not in text  # sent as an image, not refused as a binary file
    assert text.endswith("what does @docs/shot.png show?")


def test_a_queued_message_brings_its_image_to_the_next_step(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    home.env["TETHER_MODEL"] = "gpt-4o"
    model_server.set_script(
        {"steps": [{"text": "thinking", "chunks": 2, "hold_at_chunks": [1]}, {"text": "seen"}]}
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    picture = png(40, 30)
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            start_turn(client, session_id, "wait")
            model_server.wait_for_requests(1)
            queued = client.call(
                TURN_START,
                TurnStartParams(
                    session_id=session_id,
                    text="and this?",
                    images=[ImageInput(name="late.png", data=picture)],
                ),
            )
            assert queued.queued
            snapshot = client.call(SESSION_READ, SessionRef(session_id=session_id))
            (waiting,) = snapshot.snapshot.queued_inputs
            assert [i.name for i in waiting.images] == ["late.png"]
            model_server.release()
            model_server.wait_for_requests(2)
    finally:
        daemon.stop()
    assert openai_images(model_server.requests[1]) == [picture]


def test_tether_models_says_which_models_take_images(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"model": "llava:13b", "steps": [{"text": "ok"}]})
    home.env["TETHER_MODEL"] = "llava:13b"
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[models."llava:13b"]\nimages = false\n')
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        refused = cli(home, "-w", str(workspace), "models")
        assert refused.stdout.splitlines() == ["* llava:13b"]
        config.write_text("")  # read again by the next request: tether's own knowledge
        listed = cli(home, "-w", str(workspace), "models")
        assert listed.stdout.splitlines() == ["* llava:13b  (images)"]
    finally:
        daemon.stop()


def test_a_fork_sends_the_images_of_the_turns_it_copied_and_outlives_its_source(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    home.env["TETHER_MODEL"] = "gpt-4o"
    shot = tmp_path / "shot.png"
    shot.write_bytes(png(320, 200))
    model_server.set_script({"steps": [{"text": "a gradient"}, {"text": "in the fork"}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        ran = cli(home, "run", "-w", str(workspace), "--image", str(shot), "what is this?")
        assert ran.returncode == 0, ran.stderr
        with daemon.client() as client:
            source = _only_session(client)
        forked = cli(home, "fork", "-w", str(workspace), source, "--json")
        assert forked.returncode == 0, forked.stderr
        fork = json.loads(forked.stdout)["session"]["id"]
        with daemon.client() as client:
            client.call(SESSION_DELETE, SessionDeleteParams(session_id=source))
        # The source's images went with it; the fork keeps its own.
        assert not (images_dir(home, workspace) / source).exists()
        again = cli(home, "run", "-w", str(workspace), "-s", fork, "and in the fork?")
        assert again.returncode == 0, again.stderr
        assert openai_images(model_server.requests[-1]) == [shot.read_bytes()]
    finally:
        daemon.stop()


def test_image_read_gives_a_sessions_image_and_refuses_what_names_none(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    """`image/read`: the bytes an `ImageRef` describes; a digest that is no digest (a path
    among them), one the session keeps no image for, or an unknown session are refused."""
    home.env["TETHER_MODEL"] = "gpt-4o"
    model_server.set_script({"steps": [{"text": "seen"}]})
    data = png(40, 30)
    daemon = start_daemon(home, workspace)
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            params = TurnStartParams(
                session_id=session_id, text="look", images=[ImageInput(name="a.png", data=data)]
            )
            client.call(TURN_START, params)
            collect_until_turn_end(client, session_id)
            snapshot = client.call(SESSION_READ, SessionRef(session_id=session_id)).snapshot
            (message,) = [i for t in snapshot.turns for i in t.items if isinstance(i, UserMessage)]
            (ref,) = message.images
            read = client.call(
                IMAGE_READ, ImageReadParams(session_id=session_id, sha256=ref.sha256)
            )
            errors: list[tuple[int, str]] = []
            for wrong_session, digest in [
                (session_id, "../../secret"),
                (session_id, "0" * 64),
                ("s-none", ref.sha256),
            ]:
                with pytest.raises(CallError) as refused:
                    client.call(
                        IMAGE_READ, ImageReadParams(session_id=wrong_session, sha256=digest)
                    )
                errors.append((refused.value.code, refused.value.message))
    finally:
        assert daemon.stop() == 0
    assert read.data == data
    assert errors[0] == (
        ErrorCode.INVALID_PARAMS,
        "`sha256` must be 64 hex digits, not '../../secret'",
    )
    assert errors[1] == (
        ErrorCode.INVALID_PARAMS,
        f"session {session_id} keeps no image {'0' * 64}",
    )
    assert errors[2][0] == ErrorCode.SESSION_NOT_FOUND
