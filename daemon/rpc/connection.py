"""One client connection: reads JSON-RPC requests, dispatches them, writes responses and
subscribed events through its byte-bounded outbox (see `tether.daemon.rpc.outbox`).

Error rules on the wire:
- a frame that is not JSON (or nested deeper than the reader goes): -32700, the connection
  stays open;
- a binary frame: -32600 with `"id": null`, unread; the connection stays open;
- JSON that is not a single request (a batch, a missing method, a wrong `jsonrpc`): -32600,
  echoing the request's `id` whenever it can be read;
- an unknown method: -32601; params that do not fit the method: -32602 naming the field;
- any request before `initialize`: NOT_INITIALIZED;
- a notification (no `id` member) is never answered, whatever happens to it. `"id": null` is a
  request and is answered with `"id": null`.

Concurrency and order: `initialize` is handled by the reader itself, so every request after
it sees the connection initialized. Every other request runs in a task of its own in the
connection's nursery, at most `MAX_REQUESTS_IN_FLIGHT` at once (beyond that the reader waits
for one to end, reading nothing meanwhile), so `turn/cancel` or `approval/respond` is answered
while a `session/compact` or `models/list` still waits on the model. Requests start in the
order they arrive but may end, and be answered, in any order: a client that needs one request
to take effect before the next waits for its response. What a handler sends (a response and
the frames that must follow it, such as `session/attach`'s replay) is queued in one
synchronous step, and session events keep their order whatever the requests do.

Cancellation: `$/cancelRequest {id}` (a notification, handled by the reader) cancels the
request with that id if it still runs; it is then answered with REQUEST_CANCELLED, unless its
handler finished its work regardless (it is then answered with its result). An unknown or
finished id does nothing. While a request runs its id may not be reused (INVALID_REQUEST);
a request with `"id": null` cannot be cancelled.

Closing the connection cancels its running requests and detaches it from every session; it
never cancels a turn. A client whose outbox overruns (it does not read what it asked for) is
closed with 1008.
"""

import itertools
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import msgspec
import trio

from tether.daemon.logs.log import DEBUG, bind, get_logger
from tether.daemon.rpc.outbox import DEFAULT_MAX_BYTES, Outbox
from tether.daemon.rpc.websocket import ConnectionClosed, WebSocket
from tether.daemon.sessions.deltas import DeltaFrame
from tether.daemon.sessions.replay import DEFAULT_RING_BYTES
from tether.daemon.sessions.session import Session
from tether.protocol import codec
from tether.protocol.base import Wire
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.jsonrpc import (
    FrameError,
    RequestId,
    decode_envelope,
    error_frame,
    result_frame,
)
from tether.protocol.methods import (
    CANCEL_REQUEST,
    METHODS,
    CancelRequestParams,
    DaemonLimits,
    Method,
)
from tether.protocol.session import Role

log = get_logger(__name__)

PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0

MAX_REQUESTS_IN_FLIGHT = 16
"""Requests of one connection that run at once; beyond that the reader waits (see above)."""

OVERRUN_CLOSE_CODE = 1008

BINARY_REFUSED = (
    "binary frames are not part of the protocol: send each message as JSON in a text frame"
)

_ids = itertools.count(1)


P = TypeVar("P", bound=Wire)
R = TypeVar("R", bound=Wire)
R_co = TypeVar("R_co", bound=Wire, covariant=True)


class Reply(msgspec.Struct, Generic[R_co], frozen=True):
    """A handler result plus frames that must follow the response with nothing in between."""

    result: R_co
    follow: list[bytes]


Handler = Callable[["Connection", Wire], Awaitable[Wire | Reply[Wire]]]
"""What the connection dispatches a method to; made from a typed handler with `on`."""


def on(
    method: Method[P, R], handler: Callable[["Connection", P], Awaitable[R | Reply[R]]]
) -> tuple[str, Handler]:
    """An entry of a handler table: `method`'s name and `handler`, which the type checker holds
    to the method's params and result types.

    The connection decodes params with the method's own params type, so the check made here
    only fails when a table is wired wrongly (a `TypeError`, answered as an internal error)."""

    async def handle(conn: "Connection", params: Wire) -> Wire | Reply[Wire]:
        if not isinstance(params, method.params):
            raise TypeError(f"{method.name} takes {method.params.__name__}, not {params!r}")
        return await handler(conn, params)

    return method.name, handle


class Connection:
    def __init__(
        self,
        ws: WebSocket,
        handlers: dict[str, Handler],
        *,
        queue_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.id = next(_ids)
        self.ws = ws
        self.handlers = handlers
        self.outbox = Outbox(queue_bytes, direct=ws)
        self.initialized = False
        self.client_name = ""
        self.client_version = ""
        self.close_reason = ""
        """Why the daemon closed it (empty: the client did, or the socket broke)."""
        self.provider_env: dict[str, str] | None = None
        """The client's provider variables from `initialize` (None: it sent none), by their
        environment names; held for this connection only."""
        self.item_deltas = True
        """The client takes `item_delta` events (its `initialize` capabilities)."""
        self.sessions: dict[str, Session] = {}
        self._slots = trio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        self._running: dict[RequestId, trio.CancelScope] = {}
        """The scope of each running request that has an id, for `$/cancelRequest`."""

    # Subscriber protocol (see tether.daemon.sessions.session)
    def offer(self, frame: bytes, delta: DeltaFrame | None = None) -> bool:
        return self.outbox.offer(frame, delta)

    def send_nowait(self, frame: bytes) -> None:
        self.outbox.send_nowait(frame)

    def role_in(self, session: Session) -> Role | None:
        return session.subscribers.get(self)

    def limits(self) -> DaemonLimits:
        """What `initialize` tells the client of this connection's limits."""
        return DaemonLimits(
            max_message_bytes=self.ws.max_message_size,
            replay_buffer_bytes=DEFAULT_RING_BYTES,
            client_queue_bytes=self.outbox.statistics().max_bytes,
            max_requests_in_flight=MAX_REQUESTS_IN_FLIGHT,
            ping_interval=PING_INTERVAL,
            ping_timeout=PING_TIMEOUT,
        )

    async def serve(self) -> None:
        """Run until the client goes away or is cut off. Cancelling it closes the connection,
        and either way the requests still running are cancelled (and not answered)."""
        # Every line this connection's tasks write carries its id, and no session's or turn's
        # until a request names one.
        bind(conn=f"c{self.id}", session=None, turn=None)
        log.info("connection opened", peer=self.ws.peer)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._keepalive)
                nursery.start_soon(self._watch_overrun)
                await self._read_loop(nursery)
                nursery.cancel_scope.cancel()
        finally:
            self.outbox.close()
            for session in self.sessions.values():
                session.detach(self)
            self.sessions.clear()
            closed = self.ws.closed
            log.info(
                "connection closed",
                client=self.client_name,
                client_version=self.client_version,
                code=None if closed is None else closed.code,
                reason=self.close_reason or (closed.reason if closed is not None else ""),
            )

    async def close(self, reason: str) -> None:
        """Send what is queued (the answer to `daemon/shutdown`, last events), then close."""
        self.close_reason = reason
        with trio.move_on_after(2):
            await self.outbox.wait_drained()
        await self.ws.aclose(code=1001, reason=reason)

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        while True:
            try:
                message = await self.ws.receive()
            except ConnectionClosed:
                return
            await self._dispatch(message, nursery)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self.ws.send_text_frames(await self.outbox.get_batch())
        except ConnectionClosed:
            return

    async def _watch_overrun(self) -> None:
        await self.outbox.wait_overrun()
        self.close_reason = "the client is not reading its messages"
        log.warning("the client does not read what it is sent; closing")
        await self.ws.aclose(OVERRUN_CLOSE_CODE, self.close_reason)

    async def _keepalive(self) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            with trio.move_on_after(PING_TIMEOUT) as timer:
                try:
                    await self.ws.ping()
                except ConnectionClosed:
                    return
            if timer.cancelled_caught:
                self.close_reason = "ping timeout"
                log.info("the client stopped answering pings; closing")
                await self.ws.aclose(code=1011, reason=self.close_reason)
                return

    async def _dispatch(self, message: str | bytes, nursery: trio.Nursery) -> None:
        if isinstance(message, bytes):
            # Not read at all: a binary frame's bytes need not even be UTF-8.
            self.send_nowait(error_frame(None, ErrorCode.INVALID_REQUEST, BINARY_REFUSED))
            return
        try:
            envelope = decode_envelope(message)
        except FrameError as exc:
            self.outbox.send_nowait(error_frame(exc.request_id, exc.code, exc.message))
            return
        # UNSET (no `id` member) makes a notification; None is the id `null`.
        notification = isinstance(envelope.id, msgspec.UnsetType)
        request_id: RequestId | None = (
            None if isinstance(envelope.id, msgspec.UnsetType) else envelope.id
        )
        method = envelope.method
        if method == CANCEL_REQUEST and envelope.jsonrpc == "2.0":
            self._cancel_request(envelope.params)
            if not notification:
                self.outbox.send_nowait(result_frame(request_id, {}))
            return
        if envelope.jsonrpc != "2.0" or method is None:
            if (
                method is None
                and envelope.jsonrpc == "2.0"
                and (len(envelope.result) > 0 or envelope.error is not None)
            ):
                return  # a response to nothing we asked; ignore it
            self.outbox.send_nowait(
                error_frame(
                    request_id,
                    ErrorCode.INVALID_REQUEST,
                    'invalid request: expected {"jsonrpc": "2.0", "method": ..., "id": ...}',
                )
            )
            return
        handler = self.handlers.get(method)
        if handler is None or method not in METHODS:
            if not notification:
                self.outbox.send_nowait(
                    error_frame(
                        request_id, ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}"
                    )
                )
            return
        try:
            if not self.initialized and method != "initialize":
                raise RpcError(ErrorCode.NOT_INITIALIZED, f"send `initialize` before {method!r}")
            params = codec.decode_params(method, envelope.params)
        except RpcError as exc:
            if not notification:
                self.outbox.send_nowait(error_frame(request_id, exc.code, exc.message, exc.data))
            return
        answer = None if notification else _Answer(request_id)
        if method == "initialize":
            await self._run(handler, method, params, answer)
            return
        await self._slots.acquire()
        if request_id is not None and request_id in self._running:
            self._slots.release()
            self.outbox.send_nowait(
                error_frame(
                    request_id,
                    ErrorCode.INVALID_REQUEST,
                    f"request id {request_id!r} is in use by a request that still runs",
                )
            )
            return
        scope = trio.CancelScope()
        if request_id is not None and answer is not None:
            self._running[request_id] = scope
        nursery.start_soon(self._run_in_task, handler, method, params, answer, scope)

    def _cancel_request(self, raw: msgspec.Raw) -> None:
        """`$/cancelRequest`: cancel the running request it names; anything else is ignored
        (it is a notification: there is no one to tell)."""
        if not self.initialized or not len(raw):
            return
        try:
            request_id = codec.decode_as(CancelRequestParams, raw).id
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        scope = self._running.get(request_id)
        if scope is not None:
            scope.cancel()

    async def _run_in_task(
        self,
        handler: Handler,
        method: str,
        params: Wire,
        answer: "_Answer | None",
        scope: trio.CancelScope,
    ) -> None:
        if isinstance(session := getattr(params, "session_id", None), str):
            bind(session=session)
        try:
            with scope:
                await self._run(handler, method, params, answer)
            if scope.cancelled_caught and answer is not None:
                self.outbox.send_nowait(
                    error_frame(answer.id, ErrorCode.REQUEST_CANCELLED, f"{method} was cancelled")
                )
        finally:
            if (
                answer is not None
                and answer.id is not None
                and self._running.get(answer.id) is scope
            ):
                del self._running[answer.id]
            self._slots.release()

    async def _run(
        self, handler: Handler, method: str, params: Wire, answer: "_Answer | None"
    ) -> None:
        started = trio.current_time()
        request_id = None if answer is None else answer.id
        try:
            reply = await handler(self, params)
        except RpcError as exc:
            log.warning(
                "request failed",
                method=method,
                id=request_id,
                code=exc.code,
                error=exc.message,
                ms=_ms_since(started),
            )
            if answer is not None:
                self.outbox.send_nowait(error_frame(answer.id, exc.code, exc.message, exc.data))
            return
        except Exception:
            log.exception("a handler failed", method=method, id=request_id)
            if answer is not None:
                self.outbox.send_nowait(
                    error_frame(answer.id, ErrorCode.INTERNAL_ERROR, f"internal error in {method}")
                )
            return
        if log.enabled(DEBUG):
            log.debug("request", method=method, id=request_id, ms=_ms_since(started))
        if answer is None:
            return
        if isinstance(reply, Reply):
            self.outbox.send_nowait(result_frame(answer.id, reply.result))
            for frame in reply.follow:
                self.outbox.send_nowait(frame)
        else:
            self.outbox.send_nowait(result_frame(answer.id, reply))


def _ms_since(started: float) -> float:
    return round((trio.current_time() - started) * 1000, 3)


class _Answer(msgspec.Struct, frozen=True):
    """Where a request's response goes: its id (None for `"id": null`)."""

    id: RequestId | None
