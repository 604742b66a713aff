"""A `Client` that many threads may call at once while notifications keep arriving.

`rpc.Client` reads the websocket inside `call`, which suits a command that does one thing at a
time. The interactive mode waits for the person, the daemon and slow calls (`session/compact`,
`models/list`) all at once, so here one reader thread owns every read: it hands each response
to the call waiting for its id and queues each notification for `next_notification`, calling
`on_notification` so that an event loop can be woken. The websocket is not thread-safe, so a
lock covers every use of it, and the reader holds it only for reads that cannot block (it
waits for data in `select`, outside the lock).
"""

import os
import queue
import select
import threading
from collections.abc import Callable
from typing import TypeVar, overload

import msgspec

from tether.clients.core.rpc import CallError, Client
from tether.clients.core.websocket import ConnectionClosed, WebSocket, WebSocketError
from tether.protocol import codec
from tether.protocol.base import Wire
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.jsonrpc import Envelope, request_frame
from tether.protocol.methods import Empty, Method

P = TypeVar("P", bound=Wire)
R = TypeVar("R", bound=Wire)

_envelope = msgspec.json.Decoder(Envelope)


class _Waiter:
    __slots__ = ("done", "envelope")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.envelope: Envelope | None = None


class SharedClient(Client):
    """Calls from any thread; notifications through `next_notification` (any thread) or the
    `on_notification` hook (run on the reader thread after each one is queued). Once the
    connection is lost, waiting calls and `next_notification` raise the `ConnectionClosed`
    (or `OSError`) that ended it."""

    def __init__(self, ws: WebSocket, info: DiscoveryInfo) -> None:
        super().__init__(ws, info)
        self.on_notification: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._waiters: dict[str, _Waiter] = {}
        self._incoming: queue.SimpleQueue[tuple[str, Wire] | None] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._stop_read, self._stop_write = os.pipe()
        self._reader = threading.Thread(target=self._read, name="tether-reader", daemon=True)
        self._reader.start()

    @overload
    def call(self, method: Method[Empty, R]) -> R: ...
    @overload
    def call(self, method: Method[P, R], params: P) -> R: ...
    def call(self, method: Method[P, R], params: P | None = None) -> R:
        waiter = _Waiter()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._next_id += 1
            request_id = f"c{self._next_id}"
            self._waiters[request_id] = waiter
            self.ws.send(request_frame(request_id, method.name, params or Empty()))
        waiter.done.wait()
        envelope = waiter.envelope
        if envelope is None:
            assert self._failure is not None
            raise self._failure
        if envelope.error is not None:
            raise CallError(method.name, envelope.error.code, envelope.error.message)
        return codec.decode_as(method.result, envelope.result)

    def next_notification(self, timeout: float | None = None) -> tuple[str, Wire]:
        try:
            item = self._incoming.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no notification in time") from None
        if item is None:
            self._incoming.put(None)  # every later reader learns it too
            assert self._failure is not None
            raise self._failure
        return item

    def close(self) -> None:
        """Stop the reader, then close the websocket (waiting calls fail)."""
        if self._reader.is_alive():
            os.write(self._stop_write, b"x")
            self._reader.join()
        os.close(self._stop_read)
        os.close(self._stop_write)
        self.ws.close()

    def _read(self) -> None:
        try:
            while True:
                if not self.ws.pending:
                    readable, _, _ = select.select([self.ws.fileno(), self._stop_read], [], [])
                    if self._stop_read in readable:
                        self._fail(ConnectionClosed(1000, "closed by the client"))
                        return
                with self._lock:
                    try:
                        frame = self.ws.recv(timeout=0)
                    except TimeoutError:
                        continue  # part of a message so far
                self._dispatch(_envelope.decode(frame))
        except (WebSocketError, OSError, ValueError) as exc:
            # ValueError: select on a socket closed under it.
            self._fail(exc if not isinstance(exc, ValueError) else ConnectionClosed(None, str(exc)))

    def _dispatch(self, envelope: Envelope) -> None:
        method = envelope.method
        if method is not None:
            params = codec.read_notification(method, envelope.params)
            if params is not None:
                self._incoming.put((method, params))
                self.on_notification()
            return
        with self._lock:
            request_id = envelope.id
            if not isinstance(request_id, str | int):
                if envelope.error is None or not self._waiters:
                    return
                # An id-less error answers a request the daemon could not read: the oldest.
                request_id = next(iter(self._waiters))
            waiter = self._waiters.pop(str(request_id), None)
        if waiter is not None:
            waiter.envelope = envelope
            waiter.done.set()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._failure = exc
            waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.done.set()
        self._incoming.put(None)
        self.on_notification()
