"""`tether bridge` as an editor runs it: a subprocess whose stdin and stdout carry one JSON-RPC
message a line, against the real daemon and the scripted model server."""

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support import (
    DaemonProcess,
    Home,
    alive,
    attach,
    collect_until_turn_end,
    persisted_events,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.clients.bridge import DISCONNECTED
from tether.protocol.events import TurnCompleted
from tether.testing import ModelServer

Message = dict[str, Any]


class BridgeProcess:
    """`tether bridge` with its stdout read, line by line, on a thread."""

    def __init__(self, home: Home, workspace: Path, *, argv: list[str] | None = None) -> None:
        """`argv`: the CLI's arguments (default: `bridge -w WORKSPACE`)."""
        argv = ["bridge", "-w", str(workspace)] if argv is None else argv
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.clients.cli.main", *argv],
            env=home.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []
        self.received: list[Message] = []
        self._changed = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = msgspec.json.decode(line)
            with self._changed:
                self.lines.append(line)
                self.received.append(message)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, method: str, params: object = None, *, request_id: object = None) -> object:
        """Send a request; its id (a fresh one unless given)."""
        if request_id is None:
            self._next_id += 1
            request_id = f"b{self._next_id}"
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.write(msgspec.json.encode(message) + b"\n")
        return request_id

    def wait_for(self, matches: Callable[[Message], bool], timeout: float = 20.0) -> Message:
        """The first message received that `matches`, once it has come."""
        found: list[Message] = []

        def seen() -> bool:
            found[:] = [m for m in self.received if matches(m)]
            return bool(found) or self.proc.poll() is not None

        with self._changed:
            self._changed.wait_for(seen, timeout)
        assert found, f"no such message within {timeout} s; received {self.received}"
        return found[0]

    def answer(self, request_id: object, timeout: float = 20.0) -> Message:
        return self.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)

    def call(self, method: str, params: object = None) -> Any:
        """The result of a request (failing on an error answer)."""
        reply = self.answer(self.send(method, params))
        assert "result" in reply, reply
        return reply["result"]

    def events(self, session_id: str) -> list[Message]:
        with self._changed:
            return [
                m["params"]
                for m in self.received
                if m.get("method") == "session/event" and m["params"]["sessionId"] == session_id
            ]

    def close(self, timeout: float = 20.0) -> tuple[int, bytes]:
        """Close stdin; the exit code and stderr."""
        assert self.proc.stdin is not None
        assert self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code, self.proc.stderr.read()

    def kill(self) -> None:
        """Kill it if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def initialize(bridge: BridgeProcess) -> Any:
    return bridge.call("initialize", {"clientName": "bridge-test", "protocolVersion": 1})


def turn_ended(session_id: str, turn_id: str) -> Callable[[Message], bool]:
    def ended(message: Message) -> bool:
        if message.get("method") != "session/event":
            return False
        params = message["params"]
        event = params["event"]
        return (
            params["sessionId"] == session_id
            and event["type"] == "turn_completed"
            and event["turnId"] == turn_id
        )

    return ended


def check_gap_free(events: list[Message], after: int) -> None:
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(after + 1, after + 1 + len(seqs))), seqs


@pytest.mark.shared_daemon
def test_a_turn_runs_and_streams_through_the_bridge(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "hello from the bridge", "chunks": 4}]})
    bridge = BridgeProcess(daemon.home, daemon.workspace)
    try:
        assert initialize(bridge)["pid"] == daemon.info.pid
        session_id = bridge.call("session/create", {})["session"]["id"]
        attached = bridge.call("session/attach", {"sessionId": session_id})
        turn_id = bridge.call("turn/start", {"sessionId": session_id, "text": "hi"})["turnId"]
        bridge.wait_for(turn_ended(session_id, turn_id))
        events = bridge.events(session_id)
        check_gap_free(events, attached["fromSeq"])
        kinds = [e["event"]["type"] for e in events]
        assert kinds.count("item_delta") == 4
        texts = [
            e["event"]["item"]["text"]
            for e in events
            if e["event"]["type"] == "item_completed"
            and e["event"]["item"]["type"] == "agent_message"
        ]
        assert texts == ["hello from the bridge"]
        # One message a line, exactly as the daemon framed it.
        assert all(line.count(b"\n") == 1 and line.endswith(b"\n") for line in bridge.lines)
        assert bridge.close() == (0, b"")
    finally:
        bridge.kill()


@pytest.mark.shared_daemon
def test_a_line_that_is_not_json_is_answered_and_the_bridge_goes_on(
    daemon: DaemonProcess,
) -> None:
    bridge = BridgeProcess(daemon.home, daemon.workspace)
    try:
        initialize(bridge)
        bridge.write(b'{"jsonrpc": "2.0", "id": "x", "method": \n')
        bridge.write(b'{"jsonrpc": "2.0", "id": "y", "method": "daemon/status"} trailing\n')
        bridge.write(b'{"jsonrpc": "2.0", "id": "z", "method": "\xff"}\n')
        bridge.write(b"\n   \n")  # blank lines are nothing
        bridge.send("bridge/nonsense", request_id="n")
        status = bridge.call("daemon/status")
        assert status["pid"] == daemon.info.pid
        errors = [m for m in bridge.received if "error" in m]
        assert [(m["id"], m["error"]["code"]) for m in errors] == [
            (None, -32700),
            (None, -32700),
            (None, -32700),
            ("n", -32601),
        ]
        assert errors[0]["error"]["message"].startswith("parse error: ")
        # JSON that is no request is the daemon's to refuse, as it is for any client.
        bridge.write(b"[1, 2]\n")
        reply = bridge.wait_for(lambda m: m.get("error", {}).get("code") == -32600)
        assert "batch" in reply["error"]["message"]
        # A CRLF line is read as its message.
        bridge.write(b'{"jsonrpc": "2.0", "id": "crlf", "method": "daemon/status"}\r\n')
        assert "result" in bridge.answer("crlf")
        assert bridge.close() == (0, b"")
    finally:
        bridge.kill()


@pytest.mark.shared_daemon
def test_stdin_closed_ends_the_bridge_after_the_answers_in_flight(daemon: DaemonProcess) -> None:
    bridge = BridgeProcess(daemon.home, daemon.workspace)
    try:
        # Everything at once, then the end of stdin: the answers still come.
        assert bridge.proc.stdin is not None
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientName": "t"}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "daemon/status"},
        ]
        bridge.write(b"".join(msgspec.json.encode(r) + b"\n" for r in requests))
        code, stderr = bridge.close()
        assert (code, stderr) == (0, b"")
        assert sorted(m["id"] for m in bridge.received) == [1, 2, 3]
        assert all("result" in m for m in bridge.received), bridge.received
    finally:
        bridge.kill()


def test_a_lost_daemon_is_reported_and_the_client_reconnects_with_its_cursor(
    home: Home, workspace: Path, daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "first answer"}, {"text": "second answer"}]})
    bridge = BridgeProcess(home, workspace)
    new_daemon: DaemonProcess | None = None
    try:
        initialize(bridge)
        session_id = bridge.call("session/create", {})["session"]["id"]
        bridge.call("session/attach", {"sessionId": session_id})
        turn_id = bridge.call("turn/start", {"sessionId": session_id, "text": "one"})["turnId"]
        last = bridge.wait_for(turn_ended(session_id, turn_id))["params"]
        cursor = {"epoch": last["epoch"], "seq": last["seq"]}
        # A crash loses what the store has not written yet; what is asserted here is the
        # bridge, so the first turn is on disk first.
        wait_until(
            lambda: any(
                isinstance(event, TurnCompleted)
                for _, event in persisted_events(home, workspace, session_id)
            ),
            "the first turn is stored",
        )
        daemon.kill()
        lost = bridge.wait_for(lambda m: m.get("method") == "bridge/disconnected")
        assert lost["params"]["code"] is None
        assert lost["params"]["reason"]
        # Not connected: a request is answered at once, by the bridge.
        refused = bridge.answer(bridge.send("daemon/status"))
        assert refused["error"]["code"] == DISCONNECTED
        assert "bridge/reconnect" in refused["error"]["message"]

        # A new daemon, and another client runs a turn the bridge's client misses.
        new_daemon = start_daemon(home, workspace, "--idle-timeout", "0")
        with new_daemon.client() as other:
            attach(other, session_id)
            second = start_turn(other, session_id, "two")
            collect_until_turn_end(other, session_id)

        reconnected = bridge.call("bridge/reconnect")
        assert reconnected == {
            "workspace": str(workspace.resolve()),
            "pid": new_daemon.info.pid,
            "started": False,
        }
        initialize(bridge)
        seen = len(bridge.events(session_id))
        again = bridge.call("session/attach", {"sessionId": session_id, "after": cursor})
        # A new daemon, a new epoch: what was missed comes as a snapshot, the first turn and
        # the second once each, and nothing is replayed behind it.
        assert again["mode"] == "snapshot"
        assert [t["id"] for t in again["snapshot"]["turns"]] == [turn_id, second]
        model_server.set_script({"steps": [{"text": "third answer"}]})
        third = bridge.call("turn/start", {"sessionId": session_id, "text": "three"})
        assert third["turnId"] not in (turn_id, second)
        bridge.wait_for(turn_ended(session_id, third["turnId"]))
        after = bridge.events(session_id)[seen:]
        check_gap_free(after, again["fromSeq"])
        assert {e["event"].get("turnId", third["turnId"]) for e in after} == {third["turnId"]}
        assert bridge.close() == (0, b"")
    finally:
        bridge.kill()
        if new_daemon is not None:
            new_daemon.stop()


@pytest.mark.shared_daemon
def test_reconnect_on_a_live_daemon_replays_what_was_missed_exactly_once(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "first"}, {"text": "missed", "chunks": 3}]})
    bridge = BridgeProcess(daemon.home, daemon.workspace)
    try:
        initialize(bridge)
        session_id = bridge.call("session/create", {})["session"]["id"]
        bridge.call("session/attach", {"sessionId": session_id})
        first = bridge.call("turn/start", {"sessionId": session_id, "text": "one"})["turnId"]
        last = bridge.wait_for(turn_ended(session_id, first))["params"]
        cursor = {"epoch": last["epoch"], "seq": last["seq"]}

        assert bridge.call("bridge/reconnect")["pid"] == daemon.info.pid
        with daemon.client() as other:
            attach(other, session_id)
            missed = start_turn(other, session_id, "two")
            collect_until_turn_end(other, session_id)
        initialize(bridge)
        seen = len(bridge.events(session_id))
        again = bridge.call("session/attach", {"sessionId": session_id, "after": cursor})
        assert (again["mode"], again["fromSeq"]) == ("replay", cursor["seq"])
        bridge.wait_for(turn_ended(session_id, missed))
        replayed = bridge.events(session_id)[seen:]
        check_gap_free(replayed, cursor["seq"])
        assert {e["event"].get("turnId", missed) for e in replayed} == {missed}
        assert [e["event"]["type"] for e in replayed].count("turn_completed") == 1
        assert bridge.close() == (0, b"")
        # Nothing more came after the end of the missed turn.
        assert bridge.events(session_id)[seen:] == replayed
    finally:
        bridge.kill()


def test_the_bridge_starts_the_daemon_when_none_runs(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    assert home.read_discovery(workspace) is None
    bridge = BridgeProcess(home, workspace)
    pid = None
    try:
        pid = initialize(bridge)["pid"]
        info = home.read_discovery(workspace)
        assert info is not None
        assert info.pid == pid
        assert bridge.close() == (0, b"")
    finally:
        bridge.kill()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not alive(pid), "the daemon the bridge started stops")
