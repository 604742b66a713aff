"""The transport as a client meets it: where to connect, what a frame may be, how the daemon
keeps the connection alive and how much it holds for a slow client.

These are the daemon's real limits (`tests/unit/test_protocol_rules.py` checks each against the
value the daemon uses); the schema publishes them as `x-tether-transport` and
`docs/protocol.md` explains them.
"""

from typing import Final

HOST: Final = "127.0.0.1"
"""The daemon listens on this loopback address only, on an ephemeral port (discovery file)."""
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""Largest message a client may send; a larger one closes the connection with 1009."""
HANDSHAKE_TIMEOUT_SECONDS: Final = 10.0
"""The websocket upgrade request must arrive within this time of connecting."""
PING_INTERVAL_SECONDS: Final = 20.0
"""The daemon pings every connection this often."""
PING_TIMEOUT_SECONDS: Final = 20.0
"""A ping not answered (pong) within this time closes the connection with 1011."""
CLIENT_BUFFER_BYTES: Final = 16 * 1024 * 1024
"""Bytes the daemon holds for one client (queued frames of every kind). A live event that would
leave less than `RESYNC_RESERVE_BYTES` of it free is not queued: the client is resynced. A
response, replay or notification that does not fit closes the connection with 1008. Only
bytes count, not frames: while a client is behind, its waiting `item_delta`s of one item
are merged (`firstSeq`), so a backlog of streamed text costs about the text."""
MERGED_DELTA_BYTES: Final = 256 * 1024
"""A merged `item_delta` grows to about this size; the next delta of the item starts another."""
RESYNC_RESERVE_BYTES: Final = 256 * 1024
"""The part of `CLIENT_BUFFER_BYTES` live events may not take: room for the `session/resync`
notice and the answers around it."""
REPLAY_RING_BYTES: Final = 8 * 1024 * 1024
"""Encoded `session/event` frames each loaded session keeps for replay; a cursor older than the
oldest frame it still holds gets a snapshot."""

CLOSE_CODES: Final = {
    1001: "the daemon is shutting down",
    1002: "the client's frames broke the websocket protocol",
    1007: "a text frame that is not UTF-8",
    1008: "the client does not read what it is sent (its buffer overran)",
    1009: "a message larger than maxMessageBytes",
    1011: "the client did not answer a ping within pingTimeoutSeconds",
}
"""Websocket close codes the daemon sends, and why."""
