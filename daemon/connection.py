"""One client connection: reads JSON-RPC requests, dispatches them in order, writes responses
and subscribed events through its outbox.

Error rules on the wire:
- a frame that is not JSON: -32700, the connection stays open;
- JSON that is not a single request (a batch, a missing method, a wrong `jsonrpc`): -32600;
- an unknown method: -32601; params that do not fit the method: -32602 naming the field;
- any request before `initialize`: NOT_INITIALIZED;
- a notification (no id) for an unknown method is ignored, as JSON-RPC prescribes.
Requests are handled one at a time per connection, so their responses keep their order.
Closing the connection detaches it from every session; it never cancels a turn.
"""

import itertools
import logging
from collections.abc import Awaitable, Callable

import msgspec
import trio
import trio_websocket
from wsproto.events import TextMessage

from tether.daemon.outbox import DEFAULT_LIMIT, Outbox
from tether.daemon.session import Session
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
from tether.protocol.methods import METHODS
from tether.protocol.session import Role

log = logging.getLogger(__name__)

PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0

_ids = itertools.count(1)

WRITE_BATCH_FRAMES = 256
"""Frames written with one send: a replay of thousands of events costs a few dozen syscalls
instead of one each, and no single write holds more than a few MB."""


def _can_batch(ws: trio_websocket.WebSocketConnection) -> bool:
    return all(hasattr(ws, name) for name in ("_wsproto", "_stream", "_stream_lock"))


async def _send_batch(ws: trio_websocket.WebSocketConnection, frames: list[str]) -> None:
    """Send several text messages with one write, under trio-websocket's own send lock (the
    same steps as `send_message`, which writes one message per call)."""
    if ws.closed is not None:
        raise trio_websocket.ConnectionClosed(ws.closed)
    data = b"".join(ws._wsproto.send(TextMessage(data=frame)) for frame in frames)
    async with ws._stream_lock:
        try:
            await ws._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await ws._abort_web_socket()
            raise trio_websocket.ConnectionClosed(ws.closed) from None


class Reply(msgspec.Struct, frozen=True):
    """A handler result plus frames that must follow the response with nothing in between."""

    result: Wire
    follow: list[bytes]


Handler = Callable[["Connection", Wire], Awaitable[Wire | Reply]]


class Connection:
    def __init__(
        self,
        ws: trio_websocket.WebSocketConnection,
        handlers: dict[str, Handler],
        *,
        queue_limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.id = next(_ids)
        self.ws = ws
        self.handlers = handlers
        self.outbox = Outbox(queue_limit)
        self.initialized = False
        self.client_name = ""
        self.sessions: dict[str, Session] = {}

    # Subscriber protocol (see tether.daemon.session)
    def offer(self, frame: bytes) -> bool:
        return self.outbox.offer(frame)

    def send_nowait(self, frame: bytes) -> None:
        self.outbox.send_nowait(frame)

    def role_in(self, session: Session) -> Role | None:
        return session.subscribers.get(self)

    async def serve(self) -> None:
        """Run until the client goes away. Cancelling it closes the connection."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._keepalive)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.outbox.close()
            for session in self.sessions.values():
                session.detach(self)
            self.sessions.clear()

    async def close(self, reason: str) -> None:
        """Send what is queued (the answer to `daemon/shutdown`, last events), then close."""
        with trio.move_on_after(2):
            await self.outbox.wait_drained()
        with trio.move_on_after(2):
            await self.ws.aclose(code=1001, reason=reason)

    async def _read_loop(self) -> None:
        while True:
            try:
                message = await self.ws.get_message()
            except trio_websocket.ConnectionClosed:
                return
            await self._dispatch(message)

    async def _write_loop(self) -> None:
        try:
            while True:
                batch = await self.outbox.get_batch()
                if _can_batch(self.ws):
                    for start in range(0, len(batch), WRITE_BATCH_FRAMES):
                        await _send_batch(self.ws, batch[start : start + WRITE_BATCH_FRAMES])
                else:
                    for frame in batch:
                        await self.ws.send_message(frame)
        except trio_websocket.ConnectionClosed:
            return

    async def _keepalive(self) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            with trio.move_on_after(PING_TIMEOUT) as timer:
                try:
                    await self.ws.ping()
                except trio_websocket.ConnectionClosed:
                    return
            if timer.cancelled_caught:
                log.info("client %s stopped answering pings; closing", self.id)
                await self.ws.aclose(code=1011, reason="ping timeout")
                return

    async def _dispatch(self, message: str | bytes) -> None:
        try:
            envelope = decode_envelope(message)
        except FrameError as exc:
            self.outbox.send_nowait(error_frame(None, exc.code, exc.message))
            return
        request_id: RequestId | None = envelope.id
        method = envelope.method
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
            if request_id is not None:
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
            reply = await handler(self, params)
        except RpcError as exc:
            if request_id is not None:
                self.outbox.send_nowait(error_frame(request_id, exc.code, exc.message, exc.data))
            return
        except Exception:
            log.exception("handler for %s failed", method)
            if request_id is not None:
                self.outbox.send_nowait(
                    error_frame(request_id, ErrorCode.INTERNAL_ERROR, f"internal error in {method}")
                )
            return
        if request_id is None:
            return
        if isinstance(reply, Reply):
            self.outbox.send_nowait(result_frame(request_id, reply.result))
            for frame in reply.follow:
                self.outbox.send_nowait(frame)
        else:
            self.outbox.send_nowait(result_frame(request_id, reply))
