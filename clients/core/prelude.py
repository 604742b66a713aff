"""A thin client's first requests, sent before msgspec and the protocol's types are imported.

`tether run` against a running daemon has one thing to do before the model is called: ask
the daemon to start the turn. Importing msgspec and the protocol's Structs costs more than
everything else the command does before that, so its first requests go out as JSON written by
the standard library, on the websocket that the typed `Client` then takes over (`handover`).
Every frame read here is kept and read again there as the protocol's types; all this module
takes from an answer is what the next request needs (a new session's id).

Only the usual case is handled: a daemon holds the workspace's lock, says it serves, and its
discovery file names it. In any other case (no daemon, one starting or stopping, a file caught
mid-write, a refused connection) `Prelude.open` returns None and the caller takes the ordinary
way (`Client.connect`), which knows them all.

The requests' params are plain dicts in the protocol's wire names (camelCase, defaults left
out, as the typed encoder writes them); a test holds them equal to the typed frames.
"""

import json
import os
from collections.abc import Mapping
from pathlib import Path

from tether.clients.core.call_error import CallError
from tether.clients.core.discovery import discovery_file, held_workspace_record, remote_locator
from tether.clients.core.initialize import initialize_params
from tether.clients.core.websocket import HandshakeClosed, HandshakeRejected, WebSocket

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from tether.clients.core.rpc import Client

JsonObject = dict[str, object]


def serving_daemon(workspace: Path) -> bytes | None:
    """The discovery file of the daemon serving `workspace` when one holds its lock, records
    that it serves, and is the process the file (the one its record names) names; else
    None."""
    remote = remote_locator(workspace)
    if remote is not None:
        return remote.discovery()
    held = held_workspace_record(workspace)
    if held is None:
        return None  # no daemon runs
    record = _json_object(held)
    recorded = None if record is None else record.get("discovery")
    try:
        raw = discovery_file(workspace, recorded if isinstance(recorded, str) else "").read_bytes()
    except OSError:
        return None
    info = _json_object(raw)
    if record is None or info is None or record.get("state") != "serving":
        return None
    if not isinstance(record.get("pid"), int) or record.get("pid") != info.get("pid"):
        return None
    return raw


def as_object(value: object) -> JsonObject | None:
    """`value` when it is a JSON object (whose keys are strings), else None."""
    if isinstance(value, dict):
        return value  # pyright: ignore[reportUnknownVariableType]
    return None


def _json_object(raw: bytes) -> JsonObject | None:
    try:
        return as_object(json.loads(raw))
    except ValueError:
        return None


def _member(message: JsonObject, name: str) -> JsonObject | None:
    return as_object(message.get(name))


class Prelude:
    """The first requests of one connection; `handover` gives it to a typed `Client`."""

    def __init__(self, ws: WebSocket, discovery: bytes) -> None:
        self.ws = ws
        self.discovery = discovery
        """The discovery file as read (the typed client decodes it)."""
        self.frames: list[bytes] = []
        """Every frame read, in order."""
        self._next_id = 0
        self._pending: list[tuple[str, str]] = []
        """(id, method) of the requests sent and not yet answered, oldest first."""

    @classmethod
    def open(
        cls, workspace: Path, *, client_name: str, env: Mapping[str, str] | None = None
    ) -> "Prelude | None":
        """Connect to the daemon serving `workspace` and send `initialize` (its answer is read
        with the next call's); None when the ordinary way must be taken (see the module)."""
        discovery = serving_daemon(workspace)
        info = None if discovery is None else _json_object(discovery)
        if discovery is None or info is None:
            return None
        port, token = info.get("port"), info.get("token")
        if not isinstance(port, int) or not isinstance(token, str):
            return None
        try:
            ws = WebSocket.connect("127.0.0.1", port, headers={"Authorization": f"Bearer {token}"})
        except (OSError, HandshakeRejected, HandshakeClosed):
            # A daemon going away (or, remote, gone behind its forward): the ordinary way
            # waits for the next one.
            return None
        prelude = cls(ws, discovery)
        prelude.send(
            "initialize", initialize_params(client_name, os.environ if env is None else env)
        )
        return prelude

    def send(self, method: str, params: JsonObject) -> str:
        """Send a request without waiting; its answer is read by a later `call` (the daemon
        answers a connection's requests in the order they came)."""
        self._next_id += 1
        request_id = f"c{self._next_id}"
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.ws.send(json.dumps(frame, ensure_ascii=False, separators=(",", ":")))
        self._pending.append((request_id, method))
        return request_id

    def call(self, method: str, params: JsonObject) -> tuple[JsonObject, bytes]:
        """Send a request and return its result with the frame that carried it (for
        `Client.read_answer`), after the answers to those sent before it; raise `CallError`
        for the first error answer among them."""
        request_id = self.send(method, params)
        while self._pending:
            frame = self.ws.recv()
            self.frames.append(frame)
            message = _json_object(frame)
            if message is None or "method" in message:
                continue  # a notification (the typed client reads it)
            answered = message.get("id")
            waiting = [entry for entry in self._pending if entry[0] == answered]
            error = _member(message, "error")
            if error is not None and (waiting or answered is None):
                name = waiting[0][1] if waiting else self._pending[0][1]
                raise CallError(name, _int(error.get("code")), str(error.get("message", "")))
            if not waiting:
                continue
            self._pending.remove(waiting[0])
            if answered == request_id:
                return _member(message, "result") or {}, frame
        raise AssertionError("unreachable: the request is pending until answered")

    def handover(self) -> "Client":
        """The typed client of this connection, holding the notifications read so far. The
        prelude is not used afterwards."""
        from tether.clients.core.rpc import Client

        assert not self._pending, "every request sent is answered before the handover"
        return Client.adopt(self.ws, self.discovery, self._next_id, self.frames)

    def close(self) -> None:
        self.ws.close()


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
