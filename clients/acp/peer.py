"""JSON-RPC 2.0 over newline-delimited stdio, the ACP transport, with threads.

The reader (`serve`, on the calling thread) reads one message per line. A request from the
editor runs on a thread of its own (a `session/prompt` lasts a whole turn, and the editor's
answers to our own requests, `session/request_permission`, must keep flowing meanwhile); a
notification runs on the reader, in order, so its handler must only note what it needs and
leave slow work to a thread. Writes are whole lines under one lock, so a notification never
interleaves with another message.

Requests to the editor (`request`) wait for the answer on an `Pending`, which `abandon`
resolves early: it sends `$/cancel_request` for the request and wakes the waiter with
`Abandoned`, and the editor's late answer is ignored.
"""

import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

import msgspec

from tether.protocol.jsonrpc import Envelope

JSON = dict[str, Any]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
RESOURCE_NOT_FOUND = -32002
"""ACP's code for a session (or another resource) that does not exist."""

_envelope = msgspec.json.Decoder(Envelope)
_encoder = msgspec.json.Encoder()


class AcpError(Exception):
    """A JSON-RPC error to answer a request with (or that the editor answered ours with)."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> JSON:
        error: JSON = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class Abandoned(Exception):
    """The request was withdrawn (`Peer.abandon`) before the editor answered it."""


class Handler(Protocol):
    def request(self, method: str, params: Any) -> object:
        """The result of the editor's request (JSON-ready); raise `AcpError` to refuse it.
        Runs on a thread of its own."""
        ...

    def notify(self, method: str, params: Any) -> None:
        """Handle the editor's notification, on the reader thread: quickly."""
        ...


class Pending:
    """A request sent to the editor, waiting for its answer."""

    def __init__(self, request_id: int) -> None:
        self.id = request_id
        self._done = threading.Event()
        self._result: object = None
        self._error: BaseException | None = None

    def resolve(self, result: object = None, error: BaseException | None = None) -> bool:
        """Settle it once; False when it already was."""
        if self._done.is_set():
            return False
        self._result, self._error = result, error
        self._done.set()
        return True

    def wait(self) -> object:
        """The editor's result; raises its `AcpError`, or `Abandoned`."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


class Peer:
    """One editor connection over a pair of byte streams (stdin and stdout by default)."""

    def __init__(self, reader: BinaryIO | None = None, writer: BinaryIO | None = None) -> None:
        self._reader = reader or sys.stdin.buffer
        self._writer = writer or sys.stdout.buffer
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, Pending] = {}
        self._closed = False

    def serve(self, handler: Handler, on_close: Callable[[], None] = lambda: None) -> None:
        """Read and dispatch until the input ends; then withdraw every request still waiting
        and call `on_close`. Request threads still running are daemon threads: they end
        with the process."""
        try:
            for line in self._reader:
                if line.strip():
                    self._dispatch(handler, line)
        finally:
            with self._lock:
                self._closed = True
                pending, self._pending = self._pending, {}
            for waiter in pending.values():
                waiter.resolve(error=Abandoned("the editor closed the connection"))
            on_close()

    def notify(self, method: str, params: object) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    def send_request(self, method: str, params: object) -> Pending:
        """Send a request; the answer settles the returned `Pending`."""
        with self._lock:
            self._next_id += 1
            waiter = Pending(self._next_id)
            if self._closed:
                waiter.resolve(error=Abandoned("the editor closed the connection"))
                return waiter
            self._pending[waiter.id] = waiter
        self._write({"jsonrpc": "2.0", "id": waiter.id, "method": method, "params": params})
        return waiter

    def abandon(self, waiter: Pending, reason: str) -> None:
        """Withdraw a request: `$/cancel_request` to the editor, `Abandoned` to the waiter."""
        with self._lock:
            known = self._pending.pop(waiter.id, None) is not None
        if known and waiter.resolve(error=Abandoned(reason)):
            self.notify("$/cancel_request", {"requestId": waiter.id})

    def _write(self, message: JSON) -> None:
        data = _encoder.encode(message) + b"\n"
        with self._write_lock:
            try:
                self._writer.write(data)
                self._writer.flush()
            except (BrokenPipeError, ValueError):
                pass  # the editor is gone; the reader sees the end of its input

    def _dispatch(self, handler: Handler, line: bytes) -> None:
        try:
            envelope = _envelope.decode(line)
            params = msgspec.json.decode(envelope.params) if len(envelope.params) else None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._write(_error(None, AcpError(PARSE_ERROR, f"unreadable message: {exc}")))
            return
        request_id = envelope.id
        if envelope.method is None:
            if isinstance(request_id, int | str):
                self._answered(request_id, envelope)
            return
        if isinstance(request_id, msgspec.UnsetType):
            try:
                handler.notify(envelope.method, params)
            except Exception as exc:  # a notification has no one to tell
                print(f"tether acp: {envelope.method}: {exc}", file=sys.stderr)
            return
        threading.Thread(
            target=self._run_request,
            args=(handler, request_id, envelope.method, params),
            name=f"acp-{envelope.method}",
            daemon=True,
        ).start()

    def _run_request(
        self, handler: Handler, request_id: int | str | None, method: str, params: Any
    ) -> None:
        try:
            result = handler.request(method, params)
        except AcpError as exc:
            self._write(_error(request_id, exc))
        except Exception as exc:
            print(f"tether acp: {method} failed: {exc!r}", file=sys.stderr)
            self._write(_error(request_id, AcpError(INTERNAL_ERROR, f"{method} failed: {exc}")))
        else:
            self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _answered(self, request_id: int | str, envelope: Envelope) -> None:
        with self._lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is None:
            return  # an answer to a withdrawn request, or to none of ours
        if envelope.error is not None:
            error = envelope.error
            waiter.resolve(error=AcpError(error.code, error.message, error.data))
        else:
            result = msgspec.json.decode(envelope.result) if len(envelope.result) else None
            waiter.resolve(result)


def _error(request_id: int | str | None, error: AcpError) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
