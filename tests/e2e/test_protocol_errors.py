"""JSON-RPC error handling and connection security, against the real daemon.

Every test talks to the daemon subprocess over a real loopback websocket: either raw frames
(`daemon.raw()`), so the exact error object on the wire is checked, or the typed CLI client.
One daemon serves the whole module (each test opens its own connections), so a test that
checks "nothing was created" compares the session list before and after.
"""

import base64
import os
import socket
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tests.support import (
    DaemonProcess,
    attach,
    create_session,
    raw_call,
    raw_request,
)
from tether.clients.core.rpc import CallError
from tether.clients.core.websocket import HandshakeRejected, WebSocket
from tether.protocol.errors import ErrorCode
from tether.protocol.jsonrpc import RequestId, request_frame
from tether.protocol.methods import (
    SESSION_DETACH,
    SESSION_READ,
    TURN_CANCEL,
    TURN_START,
    InitializeParams,
    SessionRef,
    TurnCancelParams,
    TurnStartParams,
)
from tether.testing import ModelServer

INIT = InitializeParams(client_name="protocol-errors")

pytestmark = pytest.mark.shared_daemon


def _initialize(ws: WebSocket, request_id: RequestId = "init") -> dict[str, Any]:
    reply = raw_request(ws, "initialize", INIT, request_id)
    assert "error" not in reply, reply
    return reply


def _error(reply: dict[str, Any]) -> dict[str, Any]:
    """The error object of an error response (and check it is a well-formed one)."""
    assert reply.get("jsonrpc") == "2.0", reply
    assert "result" not in reply, reply
    error = reply["error"]
    assert isinstance(error, dict), reply
    assert isinstance(error["code"], int), reply
    assert isinstance(error["message"], str), reply
    assert error["message"], reply
    return error  # type: ignore[return-value]


def _frame(obj: object) -> bytes:
    return msgspec.json.encode(obj)


# --- 1. parse errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    ['{"jsonrpc": "2.0", "id": 1, "method": "initialize"', "not json at all", "{'single': 1}"],
)
def test_malformed_json_is_parse_error_and_connection_survives(
    daemon: DaemonProcess, frame: str
) -> None:
    with daemon.raw() as ws:
        reply = raw_call(ws, frame)
        assert reply["id"] is None
        assert _error(reply)["code"] == ErrorCode.PARSE_ERROR == -32700
        # The same connection still serves requests: initialize, then another method.
        init = _initialize(ws, "after-parse-error")
        assert init["id"] == "after-parse-error"
        assert init["result"]["protocolVersion"] == 1
        again = raw_call(ws, "][")
        assert _error(again)["code"] == -32700
        status = raw_request(ws, "daemon/status", {}, "status")
        assert status["id"] == "status"
        assert status["result"]["pid"] == daemon.proc.pid


# --- 2. invalid requests ------------------------------------------------------------------------


def test_batch_is_invalid_request(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientName": "x"}}]
        reply = raw_call(ws, _frame(batch))
        assert reply["id"] is None
        error = _error(reply)
        assert error["code"] == ErrorCode.INVALID_REQUEST == -32600
        assert "batch" in error["message"]
        # The batched initialize was not executed: a plain one is still the first.
        assert _initialize(ws)["result"]["protocolVersion"] == 1


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({"jsonrpc": "2.0", "id": 7}, 7),  # no method
        ({"jsonrpc": "2.0", "id": "x", "params": {}}, "x"),  # no method
        ({"jsonrpc": "1.0", "id": 8, "method": "daemon/status"}, 8),  # wrong version
        ({"id": 9, "method": "daemon/status"}, 9),  # no jsonrpc member
        ({"jsonrpc": "2.0", "id": [1], "method": "daemon/status"}, None),  # id of a bad type
        ({"jsonrpc": "2.0", "id": 10, "method": 5}, 10),  # method not a string
        ({"jsonrpc": 2.0, "id": "m", "method": "daemon/status"}, "m"),  # jsonrpc not a string
        ({"jsonrpc": "2.0", "id": True, "method": 5}, None),  # a boolean is no id
        (42, None),  # JSON, but not an object
        ("daemon/status", None),
    ],
)
def test_not_a_request_is_invalid_request(
    daemon: DaemonProcess, message: object, expected_id: object
) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        before = raw_request(ws, "session/list", {}, "before")["result"]
        reply = raw_call(ws, _frame(message))
        assert reply["id"] == expected_id
        assert _error(reply)["code"] == ErrorCode.INVALID_REQUEST
        # Still usable afterwards.
        assert raw_request(ws, "session/list", {}, "ok")["result"] == before


def test_invalid_request_before_initialize_is_still_invalid_request(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        reply = raw_call(ws, _frame({"jsonrpc": "1.0", "id": 3, "method": "initialize"}))
        assert (reply["id"], _error(reply)["code"]) == (3, ErrorCode.INVALID_REQUEST)
        # The refused frame did not count as the initialize.
        assert _initialize(ws)["result"]["protocolVersion"] == 1


# --- 3. unknown methods -------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", [41, "req-41"])
def test_unknown_method_is_method_not_found_with_id(
    daemon: DaemonProcess, request_id: int | str
) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        reply = raw_request(ws, "session/explode", {}, request_id)
        assert reply["id"] == request_id
        error = _error(reply)
        assert error["code"] == ErrorCode.METHOD_NOT_FOUND == -32601
        assert "session/explode" in error["message"]


def test_unknown_method_before_initialize_is_method_not_found(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        reply = raw_request(ws, "no/such", {}, "u1")
        assert (reply["id"], _error(reply)["code"]) == ("u1", ErrorCode.METHOD_NOT_FOUND)


def test_unknown_notification_gets_no_response(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        ws.send(_frame({"jsonrpc": "2.0", "method": "no/such/notification", "params": {}}))
        ws.send(_frame({"jsonrpc": "2.0", "method": "session/explode"}))
        # A notification for a known method with bad params is not answered either.
        ws.send(_frame({"jsonrpc": "2.0", "method": "session/create", "params": {"title": 5}}))
        reply = raw_request(ws, "daemon/status", {}, "next")
        assert reply["id"] == "next", reply
        assert "result" in reply, reply
        # And nothing trails behind it.
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.3)


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("no/such", {}, ErrorCode.METHOD_NOT_FOUND),
        ("session/create", {"title": 5}, ErrorCode.INVALID_PARAMS),
    ],
)
def test_null_id_is_a_request_answered_with_null_id(
    daemon: DaemonProcess, method: str, params: object, code: ErrorCode
) -> None:
    with daemon.raw() as ws:
        early = raw_call(ws, _frame({"jsonrpc": "2.0", "id": None, "method": "daemon/status"}))
        assert early["id"] is None
        assert _error(early)["code"] == ErrorCode.NOT_INITIALIZED
        _initialize(ws)
        status = raw_call(ws, _frame({"jsonrpc": "2.0", "id": None, "method": "daemon/status"}))
        assert status["id"] is None
        assert status["result"]["pid"] == daemon.proc.pid
        reply = raw_call(
            ws, _frame({"jsonrpc": "2.0", "id": None, "method": method, "params": params})
        )
        assert reply["id"] is None
        assert _error(reply)["code"] == code


def test_notification_of_a_known_method_gets_no_response(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        ws.send(_frame({"jsonrpc": "2.0", "method": "daemon/status"}))
        ws.send(_frame({"jsonrpc": "2.0", "method": "daemon/status", "params": {}}))
        reply = raw_request(ws, "daemon/status", {}, "after")
        assert reply["id"] == "after", reply
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.3)


def test_stray_response_is_ignored(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        ws.send(_frame({"jsonrpc": "2.0", "id": 99, "result": {"whatever": 1}}))
        ws.send(_frame({"jsonrpc": "2.0", "id": 98, "error": {"code": 1, "message": "x"}}))
        reply = raw_request(ws, "daemon/status", {}, "after-stray")
        assert reply["id"] == "after-stray"
        assert "result" in reply


# --- 4. invalid params --------------------------------------------------------------------------


def test_wrong_param_type_is_invalid_params_naming_the_field(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        before = raw_request(ws, "session/list", {}, "p0")["result"]
        reply = raw_request(ws, "session/create", {"title": 5}, "p1")
        assert reply["id"] == "p1"
        error = _error(reply)
        assert error["code"] == ErrorCode.INVALID_PARAMS == -32602
        assert "`$.title`" in error["message"]
        assert "session/create" in error["message"]
        # Nothing was created.
        assert raw_request(ws, "session/list", {}, "p2")["result"] == before


def test_missing_param_is_invalid_params_naming_the_wire_field(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        reply = raw_request(ws, "turn/start", {"text": "hello"}, "p3")
        assert reply["id"] == "p3"
        error = _error(reply)
        assert error["code"] == ErrorCode.INVALID_PARAMS
        # The wire (camelCase) spelling, which is what a client author wrote.
        assert "`sessionId`" in error["message"]
        assert "session_id" not in error["message"]


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        ("session/read", {"sessionId": 12}, "$.sessionId"),
        ("session/attach", {"sessionId": "s", "role": "boss"}, "$.role"),
        ("session/attach", {"sessionId": "s", "after": {"seq": "x"}}, "$.after.seq"),
        # Params are checked before the handler runs: -32602, not ALREADY_INITIALIZED.
        ("initialize", {"clientName": 3}, "$.clientName"),
        ("session/create", [1, 2], "object"),
        ("session/create", "title", "object"),
    ],
)
def test_other_invalid_params(
    daemon: DaemonProcess, method: str, params: object, needle: str
) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        reply = raw_request(ws, method, params, "bad")
        assert reply["id"] == "bad"
        error = _error(reply)
        assert error["code"] == ErrorCode.INVALID_PARAMS, error
        assert needle in error["message"]


def test_empty_turn_text_is_invalid_params(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        session_id = create_session(client)
        with pytest.raises(CallError) as caught:
            client.call(TURN_START, TurnStartParams(session_id=session_id, text="  \n"))
        assert caught.value.code == ErrorCode.INVALID_PARAMS
        assert "text" in caught.value.message


# --- 5. initialize ordering ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "method", ["daemon/status", "session/list", "session/create", "tools/list", "daemon/shutdown"]
)
def test_request_before_initialize_is_not_initialized(daemon: DaemonProcess, method: str) -> None:
    with daemon.raw() as probe:
        _initialize(probe)
        before = raw_request(probe, "session/list", {}, "before")["result"]
    with daemon.raw() as ws:
        reply = raw_request(ws, method, {}, "early")
        assert reply["id"] == "early"
        error = _error(reply)
        assert error["code"] == ErrorCode.NOT_INITIALIZED == -32002
        assert "initialize" in error["message"]
        # The refused request had no effect, and initialize still works afterwards.
        _initialize(ws)
        assert raw_request(ws, "session/list", {}, "l")["result"] == before
    assert daemon.proc.poll() is None  # an early daemon/shutdown did not stop it


def test_second_initialize_is_already_initialized(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws, "first")
        reply = raw_request(ws, "initialize", INIT, "second")
        assert reply["id"] == "second"
        assert _error(reply)["code"] == ErrorCode.ALREADY_INITIALIZED == -32003
        # The connection stays initialized and usable.
        assert "result" in raw_request(ws, "daemon/status", {}, "s")


def test_newer_protocol_is_refused_and_connection_stays_uninitialized(
    daemon: DaemonProcess,
) -> None:
    with daemon.raw() as ws:
        params = InitializeParams(client_name="future", protocol_version=99)
        reply = raw_request(ws, "initialize", params, "future")
        assert _error(reply)["code"] == ErrorCode.UNSUPPORTED_PROTOCOL == -32004
        assert "99" in _error(reply)["message"]
        assert _error(raw_request(ws, "daemon/status", {}, "s"))["code"] == (
            ErrorCode.NOT_INITIALIZED
        )
        assert _initialize(ws)["result"]["protocolVersion"] == 1


# --- 6. unknown sessions ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["session/attach", "session/read"])
def test_unknown_session_is_session_not_found(daemon: DaemonProcess, method: str) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        reply = raw_request(ws, method, {"sessionId": "no-such-session"}, "s404")
        assert reply["id"] == "s404"
        error = _error(reply)
        assert error["code"] == ErrorCode.SESSION_NOT_FOUND == -32010
        assert "no-such-session" in error["message"]


def test_unknown_session_for_turns_is_session_not_found(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        with pytest.raises(CallError) as started:
            client.call(TURN_START, TurnStartParams(session_id="nope", text="hi"))
        assert started.value.code == ErrorCode.SESSION_NOT_FOUND
        with pytest.raises(CallError) as cancelled:
            client.call(TURN_CANCEL, TurnCancelParams(session_id="nope"))
        assert cancelled.value.code == ErrorCode.SESSION_NOT_FOUND


def test_detach_when_not_attached_is_not_attached(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        session_id = create_session(client)
        with pytest.raises(CallError) as caught:
            client.call(SESSION_DETACH, SessionRef(session_id=session_id))
        assert caught.value.code == ErrorCode.NOT_ATTACHED == -32012


# --- 7. who may connect -------------------------------------------------------------------------


def _rejected(daemon: DaemonProcess, headers: dict[str, str]) -> HandshakeRejected:
    with pytest.raises(HandshakeRejected) as caught:
        WebSocket.connect("127.0.0.1", daemon.port, headers=headers).close()
    return caught.value


def test_missing_token_is_refused_with_401(daemon: DaemonProcess) -> None:
    refusal = _rejected(daemon, {})
    assert refusal.status == 401
    assert b"token" in refusal.body


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer " + "0" * 64,
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "{token}",  # the right token without the scheme
        "Bearer {token}x",  # the right token plus a character
        "Bearer {prefix}",  # the right token minus its last character
        "Token {token}",  # the right token under another scheme
    ],
)
def test_wrong_token_is_refused_with_401(daemon: DaemonProcess, authorization: str) -> None:
    value = authorization.format(token=daemon.token, prefix=daemon.token[:-1])
    assert value != f"Bearer {daemon.token}"
    refusal = _rejected(daemon, {"Authorization": value})
    assert refusal.status == 401


def test_right_token_is_accepted_case_insensitive_scheme(daemon: DaemonProcess) -> None:
    with daemon.raw({"Authorization": f"bearer {daemon.token}"}) as ws:
        assert _initialize(ws)["result"]["pid"] == daemon.proc.pid


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://127.0.0.1", "null", "http://localhost"]
)
def test_browser_origin_is_refused_with_403(daemon: DaemonProcess, origin: str) -> None:
    refusal = _rejected(daemon, {"Authorization": f"Bearer {daemon.token}", "Origin": origin})
    assert refusal.status == 403
    assert b"origin" in refusal.body


def test_origin_is_checked_before_the_token(daemon: DaemonProcess) -> None:
    # A page cannot learn from the status whether it guessed the token.
    refusal = _rejected(daemon, {"Origin": "https://evil.example"})
    assert refusal.status == 403


def _raw_upgrade(port: int, host_header: str, token: str) -> bytes:
    """Send a hand-written upgrade request; return the response head (status line + headers)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        "GET / HTTP/1.1\r\n"
        f"Host: {host_header}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n"
        "\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return head


def test_raw_upgrade_with_loopback_host_is_accepted(daemon: DaemonProcess) -> None:
    # The control for the Host test below: the same hand-written request, a loopback Host.
    for host in (f"127.0.0.1:{daemon.port}", f"localhost:{daemon.port}", "localhost"):
        head = _raw_upgrade(daemon.port, host, daemon.token)
        assert head.startswith(b"HTTP/1.1 101 "), (host, head)


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:{port}",
        "evil.example",
        "127.0.0.1.evil.example:{port}",
        "localhost.evil.example:{port}",
        "0.0.0.0:{port}",
    ],
)
def test_raw_upgrade_with_foreign_host_is_refused_with_403(
    daemon: DaemonProcess, host: str
) -> None:
    head = _raw_upgrade(daemon.port, host.format(port=daemon.port), daemon.token)
    assert head.startswith(b"HTTP/1.1 403 "), head


# --- 8. roles and turns -------------------------------------------------------------------------


def test_observer_cannot_steer(daemon: DaemonProcess) -> None:
    with daemon.client("owner") as owner, daemon.client("watcher") as watcher:
        session_id = create_session(owner)
        attach(watcher, session_id, role="observer")
        with pytest.raises(CallError) as started:
            watcher.call(TURN_START, TurnStartParams(session_id=session_id, text="do it"))
        assert started.value.code == ErrorCode.NOT_CONTROLLER == -32013
        with pytest.raises(CallError) as cancelled:
            watcher.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
        assert cancelled.value.code == ErrorCode.NOT_CONTROLLER
        # No turn was started by the refused request.
        read = owner.call(SESSION_READ, SessionRef(session_id=session_id))
        assert read.snapshot.turns == []
        # Re-attaching as controller lifts the restriction: now the error is "no running turn".
        attach(watcher, session_id, role="controller")
        with pytest.raises(CallError) as again:
            watcher.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
        assert again.value.code == ErrorCode.NO_RUNNING_TURN


def test_cancel_without_running_turn_is_no_running_turn(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        created = raw_request(ws, "session/create", {}, "c")
        session_id = created["result"]["session"]["id"]
        reply = raw_request(ws, "turn/cancel", {"sessionId": session_id}, "cancel")
        assert reply["id"] == "cancel"
        error = _error(reply)
        assert error["code"] == ErrorCode.NO_RUNNING_TURN == -32014
        assert session_id in error["message"]
        named = raw_request(ws, "turn/cancel", {"sessionId": session_id, "turnId": "t-x"}, "c2")
        assert _error(named)["code"] == ErrorCode.NO_RUNNING_TURN


# --- 9. the happy path shapes -------------------------------------------------------------------


def test_initialize_result_shape(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        reply = _initialize(ws, 1)
        assert reply["jsonrpc"] == "2.0"
        assert reply["id"] == 1
        result = reply["result"]
        assert result["protocolVersion"] == 1
        assert result["workspace"] == str(daemon.workspace.resolve())
        assert result["pid"] == daemon.proc.pid
        assert isinstance(result["daemonVersion"], str)
        assert result["daemonVersion"]


def test_tools_list_has_read_only_tools_with_schemas(daemon: DaemonProcess) -> None:
    with daemon.raw() as ws:
        _initialize(ws)
        reply = raw_request(ws, "tools/list", {}, "tools")
        assert reply["id"] == "tools"
        tools = {tool["name"]: tool for tool in reply["result"]["tools"]}
        assert {"read_file", "list_dir"} <= set(tools)
        for name in ("read_file", "list_dir"):
            tool = tools[name]
            schema = tool["inputSchema"]
            assert isinstance(schema, dict), tool
            assert schema.get("type") == "object", schema
            assert "path" in schema.get("properties", {}), schema
            assert tool["readOnly"] is True
            assert isinstance(tool["description"], str)
            assert tool["description"]
        assert "path" in tools["read_file"]["inputSchema"].get("required", [])


# --- 10. slow requests do not hold up the connection --------------------------------------------


def _read_until(
    ws: WebSocket, done: Callable[[dict[str, Any]], bool], timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Read frames until `done(frame)` holds; return them all, the last one included."""
    frames: list[dict[str, Any]] = []
    while not frames or not done(frames[-1]):
        frame = msgspec.json.decode(ws.recv(timeout=timeout))
        assert isinstance(frame, dict)
        frames.append(frame)  # pyright: ignore[reportUnknownArgumentType]
    return frames


def _event_kind(frame: dict[str, Any]) -> str | None:
    if frame.get("method") != "session/event":
        return None
    return frame["params"]["event"]["type"]


def _session_with_history(ws: WebSocket) -> str:
    """A session with one finished turn (a tool call and an answer), attached on `ws`, long
    enough that a summary would make it shorter (so compaction calls the model)."""
    session_id = raw_request(ws, "session/create", {}, "create")["result"]["session"]["id"]
    assert "result" in raw_request(ws, "session/attach", {"sessionId": session_id}, "attach")
    text = "explain; " + "some background on it. " * 40
    ws.send(request_frame("turn", "turn/start", {"sessionId": session_id, "text": text}))
    _read_until(ws, lambda f: _event_kind(f) == "turn_completed")
    return session_id


HELD_SUMMARY = {"text": "Summary.", "delay_ms": 60_000}
"""A summarising model call that stays open for a minute unless it is cancelled."""
HISTORY_STEPS = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
    {"text": "It greets."},
]


def test_compaction_does_not_hold_up_other_requests_on_its_connection(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [*HISTORY_STEPS, HELD_SUMMARY]})
    with daemon.raw() as ws:
        _initialize(ws)
        session_id = _session_with_history(ws)
        ws.send(request_frame("compact", "session/compact", {"sessionId": session_id}))
        started = _read_until(ws, lambda f: _event_kind(f) == "turn_started")
        compaction_turn = started[-1]["params"]["event"]["turnId"]
        model_server.wait_for_requests(3)  # the summary call is open at the model
        ws.send(request_frame("status", "daemon/status", {}))
        ws.send(request_frame("cancel", "turn/cancel", {"sessionId": session_id}))
        frames = _read_until(ws, lambda f: f.get("id") == "compact")
        if not any(f.get("id") == "status" for f in frames):
            frames += _read_until(ws, lambda f: f.get("id") == "status")
    # Requests are answered as they end, not in the order they came; the compaction ends
    # once `turn/cancel` has cancelled it.
    answered = [f["id"] for f in frames if "id" in f]
    assert sorted(answered) == ["cancel", "compact", "status"], answered
    assert answered.index("cancel") < answered.index("compact"), answered
    by_id = {f["id"]: f for f in frames if "id" in f}
    assert by_id["status"]["result"]["pid"] == daemon.proc.pid
    assert by_id["cancel"]["result"] == {"turnId": compaction_turn}
    compact = by_id["compact"]
    assert "result" in compact or compact["error"]["code"] != ErrorCode.INTERNAL_ERROR, compact
    # The session's events kept their order: the compaction turn ended after it started.
    kinds = [_event_kind(f) for f in frames if _event_kind(f)]
    assert kinds[-1] == "turn_completed", kinds


def test_closing_a_connection_cancels_its_slow_requests(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [*HISTORY_STEPS, HELD_SUMMARY]})
    with daemon.raw() as watcher:
        _initialize(watcher)
        session_id = _session_with_history(watcher)
        with daemon.raw() as ws:
            _initialize(ws)
            ws.send(request_frame("compact", "session/compact", {"sessionId": session_id}))
            started = _read_until(watcher, lambda f: _event_kind(f) == "turn_started")
            model_server.wait_for_requests(3)
        # The held model call is abandoned with the connection: the turn ends now, not in 60 s.
        ended = _read_until(watcher, lambda f: _event_kind(f) == "turn_completed")
        turn_id = started[-1]["params"]["event"]["turnId"]
        assert ended[-1]["params"]["event"]["turnId"] == turn_id


def test_a_failed_compaction_is_a_typed_error(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [*HISTORY_STEPS, {"text": "  "}]})
    with daemon.raw() as ws:
        _initialize(ws)
        session_id = _session_with_history(ws)
        ws.send(request_frame("compact", "session/compact", {"sessionId": session_id}))
        reply = _read_until(ws, lambda f: f.get("id") == "compact")[-1]
        error = _error(reply)
        assert error["code"] == ErrorCode.COMPACTION_FAILED, error
        assert "empty summary" in error["message"]
