"""`tether bridge`: the daemon's JSON-RPC as lines on stdin and stdout, for editors with a job
API and no websocket library.

Each line read from stdin is one JSON-RPC message, sent as one text frame to the workspace's
daemon; each frame the daemon sends is written to stdout as one line. Messages pass through
unchanged (the protocol is the daemon's, `docs/protocol.md`), except the few the bridge keeps:

    a line that is not JSON        answered on stdout with -32700, id null; nothing is sent
                                   (empty lines are skipped)
    a line over MAX_MESSAGE_BYTES  answered with -32600 (the daemon would close the connection)
    a `bridge/...` request         the bridge's own methods (`BRIDGE_METHODS`), answered by it
    the connection lost            a `bridge/disconnected {reason, code}` notification, then
                                   DISCONNECTED for each request still unanswered (it may or
                                   may not have run); the bridge stays, answers requests with
                                   DISCONNECTED and drops notifications until a
                                   `bridge/reconnect`
    `bridge/reconnect`             (re)connects, starting a daemon when none runs, and answers
                                   `{workspace, pid, started}`; the new connection is not
                                   initialized: the client sends `initialize`, then attaches
                                   with its own cursor. The bridge never reconnects by itself.
    stdin's end                    the answers to requests still in flight are relayed (for
                                   up to EOF_ANSWER_WAIT), the websocket is closed cleanly and
                                   `run` returns 0; the end of stdout (its reader gone) ends
                                   the bridge the same way, at once

So every request with a string or integer id gets exactly one answer. To know which are in
flight, the bridge reads the `id` and `method` of every message both ways (msgspec skips the
rest: about half a microsecond for an event, 0.4 ms for a megabyte of snapshot).

One thread, `select` on stdin and the socket: the websocket is not thread-safe (reading
answers pings, which writes), and a single loop keeps the order of what each side sent
without locks. Frames read together are written to stdout with one flush. A client that stops
reading stdout stops the bridge reading the socket, and the daemon's flow control applies to
it (`session/resync`, or a close after unanswered pings).
"""

import os
import select
import time
from pathlib import Path
from typing import BinaryIO, Final

import msgspec

from tether.clients.core.discovery import DaemonUnavailable, connect
from tether.clients.core.websocket import ConnectionClosed, WebSocket
from tether.protocol.errors import ErrorCode
from tether.protocol.transport import CLOSE_CODES, MAX_MESSAGE_BYTES

DISCONNECTED: Final = -32040
"""Error of a request sent while the bridge has no connection to the daemon."""
RECONNECT_FAILED: Final = -32041
"""`bridge/reconnect` could not reach or start a daemon; the message says why."""

BRIDGE_METHODS: Final = ("bridge/reconnect",)
"""Methods the bridge answers itself; any other `bridge/` method gets -32601."""
DISCONNECTED_NOTIFICATION: Final = "bridge/disconnected"

EOF_ANSWER_WAIT: Final = 5.0
"""Seconds the bridge waits, once stdin has ended, for the answers to requests in flight."""

_READ_SIZE = 1 << 16


class _Peek(msgspec.Struct):
    """What the bridge reads of a line: enough to route it (the rest is checked as JSON and
    skipped)."""

    method: str | None = None
    id: msgspec.Raw = msgspec.Raw(b"")
    """The id's JSON as sent; empty for a notification."""


class _Answer(msgspec.Struct):
    """What the bridge reads of a daemon's message: whether it answers a request, and which."""

    method: str | None = None
    id: str | int | msgspec.UnsetType | None = msgspec.UNSET


class _ErrorObject(msgspec.Struct):
    code: int
    message: str


class _Error(msgspec.Struct):
    id: msgspec.Raw
    error: _ErrorObject
    jsonrpc: str = "2.0"


class _Result(msgspec.Struct):
    id: msgspec.Raw
    result: object
    jsonrpc: str = "2.0"


class _Notification(msgspec.Struct):
    method: str
    params: object
    jsonrpc: str = "2.0"


class Reconnected(msgspec.Struct, rename="camel"):
    """The result of `bridge/reconnect`."""

    workspace: str
    pid: int
    started: bool
    """Whether the bridge started this daemon."""


class Disconnected(msgspec.Struct, rename="camel"):
    """The params of `bridge/disconnected`."""

    reason: str
    code: int | None
    """The websocket close code, when the daemon sent one (1001: it is shutting down)."""


_peek = msgspec.json.Decoder(_Peek)
_answer = msgspec.json.Decoder(_Answer)
_encoder = msgspec.json.Encoder()
_NULL = msgspec.Raw(b"null")


class Bridge:
    """Relays between `stdin` (a file descriptor of lines) and `stdout` and the daemon of
    `workspace`. Use `run`."""

    def __init__(self, workspace: Path, stdin: int, stdout: BinaryIO) -> None:
        self.workspace = workspace
        self._stdin = stdin
        self._out = stdout
        self._ws: WebSocket | None = None
        self._pending = bytearray()
        """Bytes of stdin read and not yet ended by a newline."""
        self._in_flight: dict[str | int, msgspec.Raw] = {}
        """Requests sent on this connection and not answered yet: the id as the daemon echoes
        it, and as the client spelled it."""

    def run(self) -> int:
        """Connect (starting the daemon when none runs; `DaemonUnavailable` if that fails),
        relay until stdin ends, close the websocket and return 0."""
        self._ws, _ = connect(self.workspace)
        try:
            while self._relay_once():
                pass
            self._wait_for_answers(time.monotonic() + EOF_ANSWER_WAIT)
        except BrokenPipeError:
            pass  # whoever read stdout is gone: as good as the end of stdin
        finally:
            self._close()
        return 0

    def _close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def _relay_once(self) -> bool:
        """Wait for either side and pass on what it sent; False once stdin has ended."""
        ws = self._ws
        readers = [self._stdin] if ws is None else [self._stdin, ws.fileno()]
        ready, _, _ = select.select(readers, [], [])
        if ws is not None and ws.fileno() in ready:
            self._from_daemon(ws)
        if self._stdin in ready:
            return self._from_client()
        return True

    def _wait_for_answers(self, deadline: float) -> None:
        while self._ws is not None and self._in_flight:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self._ws.fileno()], [], [], left)
            if ready:
                self._from_daemon(self._ws)

    # ------------------------------------------------------------------ daemon → stdout

    def _from_daemon(self, ws: WebSocket) -> None:
        try:
            frame = ws.recv(timeout=0)
        except TimeoutError:
            return  # part of a frame: the rest comes with a later read
        except ConnectionClosed as exc:
            self._lost(exc)
            return
        out = self._out
        while True:
            if self._in_flight:
                self._note_answer(frame)
            # Valid JSON has newlines only as whitespace (a string holds them escaped).
            if b"\n" in frame or b"\r" in frame:
                frame = frame.replace(b"\n", b" ").replace(b"\r", b" ")
            out.write(frame)
            out.write(b"\n")
            if not ws.pending:
                break
            frame = ws.recv()
        out.flush()
        if ws.fileno() < 0:
            # Closed while reading (a close frame behind the last message): say so now, the
            # socket will not wake `select` again.
            try:
                ws.recv(timeout=0)
            except ConnectionClosed as exc:
                self._lost(exc)

    def _note_answer(self, frame: bytes) -> None:
        try:
            answer = _answer.decode(frame)
        except msgspec.DecodeError:
            return  # not the daemon's to send; relayed as it came
        if answer.method is None and isinstance(answer.id, str | int):
            self._in_flight.pop(answer.id, None)

    def _lost(self, exc: ConnectionClosed) -> None:
        self._ws = None
        if exc.code is not None:
            why = CLOSE_CODES.get(exc.code, exc.reason or "the daemon closed the connection")
            reason = f"{why} (close code {exc.code})"
        else:
            reason = exc.reason or "the connection to the daemon was lost"
        self._write(_Notification(DISCONNECTED_NOTIFICATION, Disconnected(reason, exc.code)))
        self._fail_in_flight()

    def _fail_in_flight(self) -> None:
        unanswered = list(self._in_flight.values())
        self._in_flight.clear()
        for request_id in unanswered:
            self._error(
                request_id,
                DISCONNECTED,
                "the connection to the daemon ended before the answer: the request may or may"
                " not have run",
            )

    # ------------------------------------------------------------------ stdin → daemon

    def _from_client(self) -> bool:
        data = os.read(self._stdin, _READ_SIZE)
        pending = self._pending
        if not data:
            if pending:
                self._line(bytes(pending))
                pending.clear()
            return False
        start = len(pending)
        pending += data
        end = pending.find(b"\n", start)
        if end < 0:
            return True
        begin = 0
        while end >= 0:
            self._line(bytes(pending[begin:end]))
            begin = end + 1
            end = pending.find(b"\n", begin)
        del pending[:begin]
        return True

    def _line(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            return
        try:
            line.decode("utf-8")
            peek = _peek.decode(line)
        except msgspec.ValidationError:
            # JSON, but not an object with a string method (a batch, a number): the daemon
            # answers it (-32600) as it answers any other client.
            peek = _Peek()
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            self._error(_NULL, ErrorCode.PARSE_ERROR, f"parse error: {exc}")
            return
        if len(line) > MAX_MESSAGE_BYTES:
            self._error(
                peek.id,
                ErrorCode.INVALID_REQUEST,
                f"a message of {len(line)} bytes; at most {MAX_MESSAGE_BYTES} are accepted",
            )
            return
        if peek.method is not None and peek.method.startswith("bridge/"):
            self._bridge_call(peek)
            return
        if self._ws is None:
            self._not_connected(peek.id)
            return
        if peek.id and peek.method is not None:
            echoed = msgspec.json.decode(peek.id)
            if isinstance(echoed, str | int) and not isinstance(echoed, bool):
                self._in_flight[echoed] = peek.id
        try:
            self._ws.send(line)
        except ConnectionClosed as exc:
            self._lost(exc)

    def _not_connected(self, request_id: msgspec.Raw) -> None:
        self._error(
            request_id,
            DISCONNECTED,
            "not connected to the daemon; send bridge/reconnect, then initialize",
        )

    def _bridge_call(self, peek: _Peek) -> None:
        if peek.method != "bridge/reconnect":
            self._error(peek.id, ErrorCode.METHOD_NOT_FOUND, f"no such method: {peek.method}")
            return
        self._close()
        self._fail_in_flight()
        try:
            self._ws, found = connect(self.workspace)
        except DaemonUnavailable as exc:
            self._error(peek.id, RECONNECT_FAILED, str(exc))
            return
        if peek.id:
            info = found.info
            self._write(_Result(peek.id, Reconnected(info.workspace, info.pid, found.started)))

    # ------------------------------------------------------------------ output

    def _error(self, request_id: msgspec.Raw, code: int, message: str) -> None:
        """Answer a request; a notification (no id) is never answered, as JSON-RPC says."""
        if request_id:
            self._write(_Error(request_id, _ErrorObject(code, message)))

    def _write(self, message: _Error | _Result | _Notification) -> None:
        self._out.write(_encoder.encode(message) + b"\n")
        self._out.flush()
