"""Following one turn into a cell, on the blocking client, in the kernel's main thread.

The cell blocks while it follows, as `tether run` does, and stops at the first of:

- `ended`: the turn completed (or failed, was cancelled, …);
- `approval`: the turn waits for an answer. The cell cannot take one while it blocks (the
  kernel handles no other request, a button's click included, until the cell ends), so it
  shows the approval with the magics that answer it and returns; the turn waits in the
  daemon, and whatever answers it (`%tether approve`, a button) follows the turn on;
- `detached`: a kernel interrupt (Ctrl-C, KeyboardInterrupt wherever it lands). The turn goes
  on in the daemon; `%tether attach` follows it again, `%tether cancel` stops it. An
  interrupt never cancels: a long task is meant to outlive what the kernel does next;
- `lost`: the connection to the daemon broke.

The connection is the caller's, and is not used again after `detached` or `lost` (an
interrupt may have landed in the middle of a frame).

Waiting is `Client.next_notification` with a timeout only while a redraw is due: the cell
redraws at most every `REDRAW_S` while text streams, and at once when an item starts or ends,
an approval comes or the turn ends. A `session/resync` re-attaches with the cursor; a
snapshot it brings replaces the view.
"""

import time
from collections.abc import Callable
from typing import Literal, Protocol

from tether.clients.core.rpc import Client
from tether.clients.core.websocket import WebSocketError
from tether.jupyter.view import TurnView
from tether.protocol.events import ItemDelta
from tether.protocol.methods import (
    SESSION_ATTACH,
    SessionAttachParams,
    SessionAttachResult,
    SessionEventParams,
)
from tether.protocol.session import Cursor

REDRAW_S = 0.2
"""The least time between two redraws while text streams."""

Outcome = Literal["ended", "approval", "detached", "lost"]


class Screen(Protocol):
    """Where a followed turn is drawn: the cell's output."""

    def show(self, view: TurnView) -> None:
        """Draw `view` as it is now (in place of what was drawn before)."""
        ...


def attach(client: Client, session_id: str, after: Cursor | None = None) -> SessionAttachResult:
    return client.call(
        SESSION_ATTACH, SessionAttachParams(session_id=session_id, after=after, role="controller")
    )


def cursor_of(result: SessionAttachResult) -> Cursor:
    return Cursor(epoch=result.epoch, seq=result.from_seq)


def follow(
    client: Client,
    view: TurnView,
    screen: Screen,
    cursor: Cursor,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Follow `view`'s turn from `cursor` (the session is attached on `client`) until it
    ends, waits for an approval, the person interrupts or the connection breaks; the view's
    `note` then says what to do next, and it has been drawn."""
    follower = _Follower(client, view, screen, cursor, clock)
    try:
        outcome = follower.run()
    except KeyboardInterrupt:
        outcome = "detached"
        view.note = (
            "detached; the turn goes on — %tether attach follows it again, %tether cancel stops it"
        )
    except (OSError, WebSocketError) as exc:
        outcome = "lost"
        view.note = (
            f"lost the connection to the daemon ({exc}); %tether attach follows the turn again"
        )
    if outcome == "approval":
        view.note = "the turn waits for an answer"
    screen.show(view)
    return outcome


class _Follower:
    def __init__(
        self,
        client: Client,
        view: TurnView,
        screen: Screen,
        cursor: Cursor,
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.view = view
        self.screen = screen
        self.cursor = cursor
        self.clock = clock
        self.drawn_at = 0.0
        self.dirty = True

    def run(self) -> Outcome:
        while True:
            if self.view.pending:
                return "approval"
            if not self.view.running:
                return "ended"
            self._draw_if_due()
            timeout = None if not self.dirty else max(self.drawn_at + REDRAW_S - self.clock(), 0)
            try:
                method, params = self.client.next_notification(timeout=timeout)
            except TimeoutError:
                continue
            if method == "session/resync":
                self._reattach()
            elif (
                isinstance(params, SessionEventParams) and params.session_id == self.view.session_id
            ):
                self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
                if self.view.apply(params.event):
                    self.dirty = True
                    if not isinstance(params.event, ItemDelta):
                        self.drawn_at = 0.0  # draw at once: something started, ended or waits

    def _draw_if_due(self) -> None:
        if self.dirty and self.clock() - self.drawn_at >= REDRAW_S:
            self.screen.show(self.view)
            self.drawn_at = self.clock()
            self.dirty = False

    def _reattach(self) -> None:
        result = attach(self.client, self.view.session_id, self.cursor)
        self.cursor = cursor_of(result)
        if result.snapshot is None:
            return  # the missed events follow, replayed
        turn = next((t for t in result.snapshot.turns if t.id == self.view.turn_id), None)
        if turn is not None:
            self.view.reload(result.snapshot, turn)
            self.dirty = True
