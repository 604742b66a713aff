"""`/ws/daemon/<id>`: one page websocket relayed to one connection of its own to a daemon.

Rules:
- every message goes through unchanged and in order, text as text, binary as binary; the
  daemon connection is authenticated with the daemon's token, which the page never sees;
- backpressure flows through: each direction is one task that reads a message and awaits its
  send before reading the next, and each connection queues at most one message read ahead,
  so a page that reads slowly stops the relay reading from the daemon (whose own bounded
  queue then resyncs that client), and a daemon that reads slowly stops it reading the page;
- closing either side closes the other: a page that closes (or vanishes) closes the daemon
  connection with 1000; a daemon that closes passes its code and reason on ("daemon: ..."),
  and one that drops the connection without a close frame closes the page with 1011
  `LOST_DAEMON`;
- the page is pinged every `PING_INTERVAL` seconds; one that does not answer within
  `PING_TIMEOUT` is gone (a laptop closed mid-session) and its daemon connection is closed.
"""

import trio
import trio_websocket

PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0
LOST_DAEMON = "lost the connection to the workspace's daemon"
PAGE_GONE = "the page did not answer a ping"

_SENDABLE_CODES = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011})
"""Close codes of the RFC's own range that may be sent in a close frame (1005, 1006 and 1015
only describe what happened locally)."""


async def relay(
    page: trio_websocket.WebSocketConnection,
    daemon: trio_websocket.WebSocketConnection,
    *,
    ping_interval: float = PING_INTERVAL,
) -> None:
    """Relay between `page` and `daemon` until either closes,
    then close the other. Cancelling it closes both."""
    async with trio.open_nursery() as nursery:

        async def page_to_daemon() -> None:
            try:
                while True:
                    await daemon.send_message(await page.get_message())
            except trio_websocket.ConnectionClosed:
                pass
            nursery.cancel_scope.cancel()

        async def daemon_to_page() -> None:
            try:
                while True:
                    await page.send_message(await daemon.get_message())
            except trio_websocket.ConnectionClosed:
                pass
            nursery.cancel_scope.cancel()

        async def keep_page_alive() -> None:
            while True:
                await trio.sleep(ping_interval)
                with trio.move_on_after(PING_TIMEOUT) as waited:
                    try:
                        await page.ping()
                    except trio_websocket.ConnectionClosed:
                        break
                if waited.cancelled_caught:
                    await page.aclose(1011, PAGE_GONE)
                    break
            nursery.cancel_scope.cancel()

        nursery.start_soon(page_to_daemon)
        nursery.start_soon(daemon_to_page)
        nursery.start_soon(keep_page_alive)
    with trio.CancelScope(shield=True):
        ended = daemon.closed
        if page.closed is None and ended is not None:
            # The daemon ended it: say so, with its code where that may be sent.
            if ended.code in _SENDABLE_CODES or 3000 <= ended.code <= 4999:
                reason = f"daemon: {ended.reason}" if ended.reason else "daemon closed"
                await _close(page, ended.code, reason)
            else:
                await _close(page, 1011, LOST_DAEMON)
        await _close(daemon, 1000, "the page left")
        await _close(page, 1011, LOST_DAEMON)


async def _close(ws: trio_websocket.WebSocketConnection, code: int, reason: str) -> None:
    if ws.closed is None:
        # A close frame carries at most 123 bytes of reason.
        with trio.move_on_after(2):
            await ws.aclose(code, reason.encode()[:123].decode(errors="ignore"))
