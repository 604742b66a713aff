"""The daemon's log as a real daemon writes it: JSON lines carrying the ids of the connection,
session and turn they were written for, and never a secret, even at debug level."""

import os
import stat
from pathlib import Path

import pytest

from tests.support import (
    Home,
    attach,
    cli,
    collect_until_turn_end,
    create_session,
    start_daemon,
)
from tether.clients.core.websocket import HandshakeRejected, WebSocket
from tether.protocol.methods import TURN_START, TurnStartParams
from tether.testing import ModelServer

API_KEY = "sk-test-4f9c2e7a1b3d5f60"
SECRET_VALUE = "hunter2-db-password-8d1e"
BEARER_VALUE = "opaque-bearer-29b7c4e1"
WRONG_TOKEN = "f" * 64


def test_a_debug_log_of_a_turn_carries_ids_and_no_secret(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    home.env["OPENAI_API_KEY"] = API_KEY
    home.env["DEPLOY_DB_PASSWORD"] = SECRET_VALUE
    model_server.set_script(
        {
            "steps": [
                # The command prints the secret variable: stripped from its environment, it
                # prints nothing, and the model's request quoting the output holds nothing.
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "arguments": {
                                "command": 'echo "pw=$DEPLOY_DB_PASSWORD"',
                                "description": "print the variable",
                            },
                        }
                    ]
                },
                # A reply quoting every secret: the debug body of the response holds them.
                {"text": f"key {API_KEY} pw {SECRET_VALUE} Authorization: Bearer {BEARER_VALUE}"},
            ]
        }
    )
    daemon = start_daemon(home, workspace, "--idle-timeout", "0", "--log-level", "debug")
    token = daemon.info.token
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            turn_id = client.call(
                TURN_START,
                TurnStartParams(
                    session_id=session_id, text=f"my token is {token}", permission_mode="auto"
                ),
            ).turn_id
            collect_until_turn_end(client, session_id)
        # A client with a wrong token is refused, and the refusal logged without what it sent.
        with pytest.raises(HandshakeRejected):
            WebSocket.connect(
                "127.0.0.1", daemon.port, headers={"Authorization": f"Bearer {WRONG_TOKEN}"}
            ).close()
    finally:
        assert daemon.stop() == 0
    assert model_server.request_headers[0]["authorization"] == f"Bearer {API_KEY}"

    folder = home.log_path(workspace).parent
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert home.log_path(workspace) in files
    for path in files:
        text = path.read_text(errors="replace")
        for secret in (API_KEY, SECRET_VALUE, BEARER_VALUE, WRONG_TOKEN, token):
            assert secret not in text, (path.name, secret)
    assert stat.S_IMODE(os.stat(home.log_path(workspace)).st_mode) == 0o600

    records = home.log_records(workspace)
    by_msg = {r["msg"]: r for r in records}
    started = by_msg["daemon started"]
    assert started["pid"] == daemon.proc.pid
    assert started["port"] == daemon.info.port
    assert "conn" not in started
    assert "session" not in started
    opened = by_msg["connection opened"]
    assert opened["conn"].startswith("c")
    assert opened["peer"].startswith("127.0.0.1:")
    tool = by_msg["tool call"]
    assert (tool["tool"], tool["outcome"], tool["exit_code"]) == ("run_command", "completed", 0)
    assert "arguments" not in tool
    assert (tool["session"], tool["turn"]) == (session_id, turn_id)
    assert "conn" not in tool, "a turn outlives the connection that started it"
    calls = [r for r in records if r["msg"] == "model call"]
    assert [c["status"] for c in calls] == ["ok", "ok"]
    assert {c["provider"] for c in calls} == {"openai"}
    assert calls[0]["turn"] == turn_id
    ended = by_msg["turn ended"]
    assert (ended["status"], ended["steps"], ended["turn"]) == ("completed", 2, turn_id)
    requests = [r for r in records if r["msg"] == "request"]
    create = next(r for r in requests if r["method"] == "session/create")
    assert create["conn"] == opened["conn"]
    start = next(r for r in requests if r["method"] == "turn/start")
    assert start["session"] == session_id
    bodies = [r for r in records if r["msg"] in ("model request", "model response")]
    assert len(bodies) == 4
    assert all(len(r["body"]) <= 4000 + 40 for r in bodies)
    assert bodies[0]["body"].endswith(" bytes in all]"), "a request is cut at 4,000"
    assert "[redacted]" in bodies[-1]["body"]
    refused = by_msg["websocket upgrade refused"]
    assert refused["status"] == 401
    assert "token" in refused["reason"]
    closed = by_msg["connection closed"]
    assert closed["client"]
    assert closed["conn"] == opened["conn"]


def test_a_daemon_that_cannot_start_says_why_on_its_stderr_file(
    home: Home, workspace: Path
) -> None:
    home.env["TETHER_LOG_LEVEL"] = "loud"
    refused = cli(home, "sessions", "-w", str(workspace))
    assert refused.returncode == 2
    assert "TETHER_LOG_LEVEL must be one of debug, info, warning, error, not 'loud'" in (
        refused.stderr
    )
    said = home.stderr_path(workspace).read_text()
    assert "tether daemon: bad config: TETHER_LOG_LEVEL must be one of" in said
    assert stat.S_IMODE(os.stat(home.stderr_path(workspace)).st_mode) == 0o600
    # No log was begun: reading it says so, and where the stderr went.
    shown = cli(home, "daemon", "logs", "-w", str(workspace))
    assert shown.returncode == 2
    assert str(home.stderr_path(workspace)) in shown.stderr


def test_at_the_default_level_no_body_or_request_is_logged(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "hello there"}]})
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        with daemon.client() as client:
            session_id = create_session(client)
            attach(client, session_id)
            client.call(TURN_START, TurnStartParams(session_id=session_id, text="hi"))
            collect_until_turn_end(client, session_id)
    finally:
        assert daemon.stop() == 0
    records = home.log_records(workspace)
    assert {r["level"] for r in records} == {"info"}
    messages = [r["msg"] for r in records]
    assert "model call" in messages
    assert "turn ended" in messages
    assert "hello there" not in home.log_path(workspace).read_text()
