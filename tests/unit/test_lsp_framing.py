"""Content-Length framing: round trips, however the stream cuts the bytes."""

import pytest
import trio
import trio.testing

from tether.daemon.lsp.errors import FramingError
from tether.daemon.lsp.framing import MessageReader, frame, parse_length

BODIES = [
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}',
    '{"jsonrpc":"2.0","method":"x","params":{"text":"héllo wörld 😀 — ✓"}}'.encode(),
    b"{}",
    ('{"text":"' + "é" * 70_000 + '"}').encode(),
]


async def feed(chunks: list[bytes]) -> list[bytes | None]:
    """Send `chunks` one by one through a memory stream and read every message back."""
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = MessageReader(receive)
    received: list[bytes | None] = []

    async def writer() -> None:
        for chunk in chunks:
            await send.send_all(chunk)
            await trio.lowlevel.checkpoint()
        await send.aclose()

    failure: FramingError | None = None
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            try:
                while (body := await reader.receive()) is not None:
                    received.append(body)
            except FramingError as exc:
                failure = exc
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return [*received, None]


async def test_round_trip_whole_messages() -> None:
    assert await feed([frame(body) for body in BODIES]) == [*BODIES, None]


@pytest.mark.parametrize(("size", "count"), [(1, 3), (2, 3), (7, 3), (997, 4), (4096, 4)])
async def test_round_trip_split_anywhere(size: int, count: int) -> None:
    """Headers and bodies cut at any byte (inside a multi-byte character too)."""
    bodies = BODIES[:count]
    data = b"".join(frame(body) for body in bodies)
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert await feed(chunks) == [*bodies, None]


async def test_length_counts_utf8_bytes() -> None:
    body = '{"s":"😀é"}'.encode()
    assert frame(body).startswith(b"Content-Length: %d\r\n\r\n" % len(body))
    assert len(body) > len('{"s":"😀é"}')


async def test_other_headers_and_case_are_accepted() -> None:
    body = b'{"a":1}'
    data = (
        b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n"
        b"CONTENT-LENGTH:   %d  \r\n\r\n" % len(body)
    ) + body
    assert await feed([data]) == [body, None]


async def test_stream_ending_inside_a_message_is_an_error() -> None:
    with pytest.raises(FramingError, match="inside a message body"):
        await feed([frame(b'{"a":1}')[:-2]])
    with pytest.raises(FramingError, match="inside a header"):
        await feed([b"Content-Len"])


@pytest.mark.parametrize(
    "header",
    [b"Content-Type: x", b"Content-Length: ten", b"Content-Length: -1", b"no colon here"],
)
def test_bad_headers(header: bytes) -> None:
    with pytest.raises(FramingError):
        parse_length(header)


async def test_oversized_header_block_is_an_error() -> None:
    with pytest.raises(FramingError, match="too long"):
        await feed([b"X-Padding: " + b"a" * 20_000])
