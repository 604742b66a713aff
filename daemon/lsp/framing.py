"""Content-Length framing over trio byte streams (the LSP base protocol).

A message is a header block and a body:

    Content-Length: 52\r\n
    Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n     (optional, ignored)
    \r\n
    {"jsonrpc":"2.0","id":1,"method":"initialize",...}

The length counts bytes of the UTF-8 body, not characters. Header names are matched without
regard to case; unknown headers are ignored. `MessageReader` reassembles messages however the
stream splits them (a header cut in two, several messages in one read). A stream that ends
between messages is a clean end (`receive` returns None); one that ends inside a message, or a
header block without a usable length, raises `FramingError`.
"""

import trio

from tether.daemon.lsp.errors import FramingError

MAX_BODY = 64 * 1024 * 1024
"""Largest body accepted; a server announcing more is treated as broken."""
MAX_HEADER = 8 * 1024
_READ_SIZE = 65536
_SEPARATOR = b"\r\n\r\n"


def frame(body: bytes) -> bytes:
    """The bytes that carry `body` (already UTF-8 encoded JSON) as one message."""
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_length(header: bytes) -> int:
    """The Content-Length of a header block (without the blank line that ends it)."""
    length: int | None = None
    for line in header.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            raise FramingError(f"malformed header line {line[:80]!r}")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"bad Content-Length {value[:40]!r}") from None
    if length is None:
        raise FramingError("header without Content-Length")
    if not 0 <= length <= MAX_BODY:
        raise FramingError(f"Content-Length {length} out of range")
    return length


class MessageReader:
    """Reads framed message bodies from a byte stream, one per `receive` call."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._eof = False

    async def receive(self) -> bytes | None:
        """The next message body, or None when the stream ends cleanly between messages.

        Raises FramingError on a malformed header or a stream that ends inside a message.
        Cancellation is safe: bytes already read stay buffered for the next call."""
        while True:
            end = self._buffer.find(_SEPARATOR)
            if end != -1:
                break
            if len(self._buffer) > MAX_HEADER:
                raise FramingError("header block too long")
            if not await self._fill():
                if self._buffer.strip():
                    raise FramingError("stream ended inside a header")
                return None
        length = parse_length(bytes(self._buffer[:end]))
        start = end + len(_SEPARATOR)
        while len(self._buffer) < start + length:
            if not await self._fill():
                raise FramingError("stream ended inside a message body")
        body = bytes(self._buffer[start : start + length])
        del self._buffer[: start + length]
        return body

    async def _fill(self) -> bool:
        if self._eof:
            return False
        data = await self._stream.receive_some(_READ_SIZE)
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True
