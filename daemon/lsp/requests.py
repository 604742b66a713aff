"""The requests a `LspClient` has in flight with its server: ids, the outbox its writer drains,
timeouts withdrawn with `$/cancelRequest`, and answers matched to their request (see `client`
for the rules)."""

import itertools
from collections.abc import Callable
from typing import TypeVar

import msgspec
import trio

from tether.daemon.lsp.errors import LspError, RequestTimeout, ResponseError, ServerGone
from tether.daemon.lsp.framing import frame
from tether.daemon.lsp.types import OutgoingNotification, OutgoingRequest, decode_as, encode
from tether.protocol.jsonrpc import Envelope

T = TypeVar("T")

OUTBOX_LIMIT = 4096
"""Messages queued for a server that is not reading; one more and it counts as crashed."""


class _Pending:
    def __init__(self, method: str) -> None:
        self.method = method
        self.done = trio.Event()
        self.result: msgspec.Raw = msgspec.Raw(b"")
        self.error: LspError | None = None


class Requests:
    """Messages to one server, and its answers to the requests among them."""

    def __init__(
        self,
        name: str,
        *,
        gone: trio.Event,
        why_gone: Callable[[], str],
        overflow: Callable[[str], None],
    ) -> None:
        """`gone` is set once the server is gone (nothing more is sent); `why_gone` says why,
        for the ServerGone raised then; `overflow` is called with a reason when the outbox is
        full (the server stopped reading), before ServerGone is raised."""
        self.name = name
        self._gone = gone
        self._why_gone = why_gone
        self._overflow = overflow
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._outbox, self.outbox = trio.open_memory_channel[bytes](OUTBOX_LIMIT)
        """`outbox`: the framed messages, for the writer to drain into the server's stdin."""

    def send(self, body: bytes) -> None:
        """Queue a message (never blocks). Raises ServerGone."""
        if self._gone.is_set():
            raise ServerGone(f"{self.name} {self._why_gone()}")
        try:
            self._outbox.send_nowait(frame(body))
        except trio.WouldBlock:
            self._overflow("stopped reading its input")
            raise ServerGone(f"{self.name} stopped reading its input") from None

    def notify(self, method: str, params: object = None) -> None:
        """Send a notification (queued; never blocks). Raises ServerGone."""
        message = OutgoingNotification(method=method)
        if params is not None:
            message.params = params
        self.send(encode(message))

    async def call(self, method: str, params: object, result_type: type[T], seconds: float) -> T:
        """Send a request and wait up to `seconds` for its result, decoded as `result_type`.
        Raises RequestTimeout, ResponseError, ServerGone; a timeout or a cancellation
        withdraws the request with `$/cancelRequest`."""
        request_id = next(self._ids)
        message = OutgoingRequest(id=request_id, method=method)
        if params is not None:
            message.params = params
        pending = _Pending(method)
        self.send(encode(message))
        self._pending[request_id] = pending
        try:
            with trio.move_on_after(seconds):
                await pending.done.wait()
        finally:
            del self._pending[request_id]
            if not pending.done.is_set() and not self._gone.is_set():
                self.notify("$/cancelRequest", {"id": request_id})
        if not pending.done.is_set():
            raise RequestTimeout(f"{self.name}: no answer to {method} within {seconds:g} s")
        if pending.error is not None:
            raise pending.error
        try:
            return decode_as(pending.result, result_type)
        except msgspec.ValidationError as exc:
            raise ResponseError(method, 0, f"unexpected result: {exc}") from exc

    def answer(self, envelope: Envelope) -> None:
        """A response arrived: wake the request it answers (an unknown id is ignored)."""
        if isinstance(envelope.id, int) and (pending := self._pending.get(envelope.id)):
            if envelope.error is not None:
                error = envelope.error
                pending.error = ResponseError(pending.method, error.code, error.message)
            else:
                pending.result = envelope.result
            pending.done.set()

    def fail_pending(self, reason: str) -> None:
        """Fail every request still waiting with ServerGone(`reason`)."""
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.error = ServerGone(f"{self.name} {reason}")
                pending.done.set()

    def statistics(self) -> dict[str, int]:
        return {
            "pending_requests": len(self._pending),
            "queued_messages": self._outbox.statistics().current_buffer_used,
        }
