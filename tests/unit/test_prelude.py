"""`tether.clients.core.prelude`: a thin client's first requests in the standard library's JSON.

Its frames must be the ones the typed client sends; it must take only the usual way (a serving
daemon its discovery file names) and leave every other case to `Client.connect`; and it must
read answers in order, raise the daemon's errors, and give the typed client what it read.
"""

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar, cast

import msgspec
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, WebSocketServer, serve_websocket

from tether.clients.cli.commands.turns import RunRequest
from tether.clients.cli.images import ImageFile
from tether.clients.core.call_error import CallError
from tether.clients.core.initialize import initialize_params
from tether.clients.core.prelude import Prelude, serving_daemon
from tether.clients.core.rpc import provider_environment
from tether.clients.core.websocket import WebSocket
from tether.protocol.methods import (
    Attachment,
    ImageInput,
    InitializeParams,
    SessionEventParams,
    TurnStartParams,
)
from tether.protocol.places import discovery_path, lock_path
from tether.protocol.version import PROTOCOL_VERSION, __version__

T = TypeVar("T")


def _read(params: dict[str, object], kind: type[T]) -> T:
    """`params` as the daemon reads them."""
    return msgspec.json.decode(json.dumps(params), type=kind)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"TETHER_MODEL": "m", "TETHER_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"},
        {"TETHER_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "a", "TETHER_API_KEY": ""},
    ],
)
def test_initialize_reads_as_what_the_typed_client_sends(env: dict[str, str]) -> None:
    typed = InitializeParams(
        client_name="tether-cli",
        client_version=__version__,
        protocol_version=PROTOCOL_VERSION,
        provider_env=provider_environment(env),
    )
    assert _read(initialize_params("tether-cli", env), InitializeParams) == typed


@pytest.mark.parametrize(
    "request_",
    [
        RunRequest("go"),
        RunRequest("fix @src/a.py and @'b c.md'", [("stdin", "log\n")], "auto", "m2"),
        RunRequest("héllo ✓", permission_mode="ask", model=""),
        RunRequest("env", env={"PATH": "/venv/bin:/usr/bin", "GITHUB_TOKEN": "ghp_x"}),
        RunRequest("big", max_input=200_000),
        RunRequest("look", images=[ImageFile("a.png", "image/png", b"\x89PNG\r\n\x1a\n\x00\xff")]),
    ],
)
def test_turn_start_reads_as_what_the_typed_client_sends(request_: RunRequest) -> None:
    typed = TurnStartParams(
        session_id="s1",
        text=request_.prompt,
        mentions=request_.mentions,
        attachments=[Attachment(name=n, text=t) for n, t in request_.attachments],
        permission_mode=request_.permission_mode,
        model=request_.model,
        images=[
            ImageInput(name=i.name, mime_type=i.mime_type, data=i.data) for i in request_.images
        ],
        env=request_.env,
        max_input_tokens=request_.max_input,
    )
    assert _read(request_.turn_start("s1"), TurnStartParams) == typed


# --- which daemons it takes ------------------------------------------------------------


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "project"


def _held(workspace: Path, record: bytes) -> Iterator[None]:
    lock = lock_path(workspace)
    lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, record)
        yield
    finally:
        os.close(fd)


def _discovery(workspace: Path, pid: int, path: Path | None = None) -> bytes:
    raw = json.dumps({"pid": pid, "port": 1, "token": "t", "protocolVersion": 1}).encode()
    path = path or discovery_path(workspace)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(raw)
    return raw


def test_a_serving_daemon_named_by_its_discovery_file_is_taken(runtime: Path) -> None:
    for _ in _held(runtime, b'{"pid": 42, "state": "serving", "startedAt": 1.0}'):
        raw = _discovery(runtime, 42)
        assert serving_daemon(runtime) == raw


def test_the_discovery_file_the_record_names_is_taken_over_this_runtime_dirs(
    runtime: Path, tmp_path: Path
) -> None:
    # The daemon was started from a shell with another runtime dir than this client's.
    theirs = tmp_path / "their-run" / "tether" / discovery_path(runtime).name
    raw = _discovery(runtime, 42, theirs)
    _discovery(runtime, 7)  # a dead daemon's, in this client's runtime dir
    record = {"pid": 42, "state": "serving", "startedAt": 1.0, "discovery": str(theirs)}
    for _ in _held(runtime, json.dumps(record).encode()):
        assert serving_daemon(runtime) == raw


def test_a_recorded_path_that_is_no_discovery_file_of_the_workspace_is_not_followed(
    runtime: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    _discovery(runtime, 42, elsewhere)
    record = {"pid": 42, "state": "serving", "startedAt": 1.0, "discovery": str(elsewhere)}
    for _ in _held(runtime, json.dumps(record).encode()):
        assert serving_daemon(runtime) is None


@pytest.mark.parametrize(
    ("record", "named"),
    [
        (b'{"pid": 42, "state": "starting", "startedAt": 1.0}', 42),
        (b'{"pid": 42, "state": "stopping", "startedAt": 1.0}', 42),
        (b'{"pid": 42, "state": "serving", "startedAt": 1.0}', 7),  # a dead daemon's file
        (b'{"pid": 42, "sta', 42),  # the record caught mid-write
        (b"", 42),  # in the instant before the holder's first write
    ],
)
def test_any_other_holder_is_left_to_the_ordinary_way(
    runtime: Path, record: bytes, named: int
) -> None:
    for _ in _held(runtime, record):
        _discovery(runtime, named)
        assert serving_daemon(runtime) is None


def test_no_daemon_or_no_discovery_file_is_left_to_the_ordinary_way(runtime: Path) -> None:
    assert serving_daemon(runtime) is None  # no lock file at all
    for _ in _held(runtime, b'{"pid": 42, "state": "serving", "startedAt": 1.0}'):
        assert serving_daemon(runtime) is None  # held, no discovery file
    _discovery(runtime, 42)
    assert serving_daemon(runtime) is None  # a file, but the lock is free: a crashed daemon
    assert Prelude.open(runtime, client_name="t") is None


# --- answers, errors and the handover ----------------------------------------------------

Replies = Callable[[list[dict[str, object]]], list[str]]
"""Given the requests read so far, the frames to send back (asked after each request)."""


async def _against_daemon(replies: Replies, client: Callable[[Prelude], T]) -> T:
    """Serve one connection that answers each request with what `replies` makes of those read
    so far; run `client` on a `Prelude` of it in a thread and return its result."""

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        received: list[dict[str, object]] = []
        with contextlib.suppress(ConnectionClosed):  # the client is done
            while True:
                received.append(json.loads(await ws.get_message()))
                for frame in replies(received):
                    await ws.send_message(frame)

    def run(port: int) -> T:
        prelude = Prelude(WebSocket.connect("127.0.0.1", port), _DISCOVERY)
        try:
            return client(prelude)
        finally:
            prelude.close()

    async with trio.open_nursery() as nursery:
        server: WebSocketServer = await nursery.start(
            partial(serve_websocket, handler, "127.0.0.1", 0, None)
        )
        with trio.fail_after(10):
            result = await trio.to_thread.run_sync(run, server.port)
        nursery.cancel_scope.cancel()
    return result


_DISCOVERY = json.dumps(
    {
        "pid": 1,
        "port": 1,
        "token": "t",
        "protocolVersion": PROTOCOL_VERSION,
        "daemonVersion": __version__,
        "workspace": "/w",
        "startedAt": 0.0,
    }
).encode()

_EVENT = json.dumps(
    {
        "jsonrpc": "2.0",
        "method": "session/event",
        "params": {
            "sessionId": "s1",
            "epoch": "e",
            "seq": 1,
            "event": {"type": "session_renamed", "title": "t"},
        },
    }
)


def _result(request: dict[str, object], result: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})


def _ordinary(received: list[dict[str, object]]) -> list[str]:
    last = received[-1]
    if last["method"] == "initialize":
        return []  # answered with the next request's answer
    if last["method"] == "session/create":
        init = _result(received[0], {"protocolVersion": 1})
        return [init, _EVENT, _result(last, {"session": {"id": "s1"}})]
    return [_result(last, {"turnId": "t1"})]


async def test_answers_are_read_in_order_and_notifications_kept_for_the_typed_client() -> None:
    def client(prelude: Prelude) -> tuple[str, str, object]:
        prelude.send("initialize", initialize_params("t", {}))
        created, _ = prelude.call("session/create", {})
        session = created["session"]
        assert isinstance(session, dict)
        _, frame = prelude.call("turn/start", {"sessionId": "s1", "text": "go"})
        typed = prelude.handover()
        from tether.protocol.methods import TURN_START

        started = typed.read_answer(TURN_START, frame)
        method, params = typed.next_notification(timeout=5)
        assert isinstance(params, SessionEventParams)
        return (
            str(cast("dict[str, object]", session)["id"]),
            started.turn_id,
            (
                method,
                params.seq,
                typed.info.pid,
            ),
        )

    session_id, turn_id, note = await _against_daemon(_ordinary, client)
    assert (session_id, turn_id) == ("s1", "t1")
    assert note == ("session/event", 1, 1)


async def test_a_refused_initialize_is_raised_at_the_next_call() -> None:
    def replies(received: list[dict[str, object]]) -> list[str]:
        if received[-1]["method"] == "initialize":
            return []
        error = {"code": -32602, "message": "invalid params for initialize: bad"}
        return [json.dumps({"jsonrpc": "2.0", "id": received[0]["id"], "error": error})]

    def client(prelude: Prelude) -> CallError:
        prelude.send("initialize", initialize_params("t", {}))
        with pytest.raises(CallError) as refused:
            prelude.call("session/create", {})
        return refused.value

    error = await _against_daemon(replies, client)
    assert (error.method, error.code) == ("initialize", -32602)
    assert "invalid params for initialize: bad" in error.message


async def test_an_error_without_an_id_is_the_oldest_waiting_request_s() -> None:
    def replies(received: list[dict[str, object]]) -> list[str]:
        error = {"code": -32700, "message": "parse error"}
        return [json.dumps({"jsonrpc": "2.0", "id": None, "error": error})]

    def client(prelude: Prelude) -> CallError:
        with pytest.raises(CallError) as refused:
            prelude.call("turn/start", {"sessionId": "s1", "text": "go"})
        return refused.value

    error = await _against_daemon(replies, client)
    assert (error.method, error.code, error.message) == ("turn/start", -32700, "parse error")
