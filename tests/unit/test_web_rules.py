"""`tether web`'s rules without sockets: which Host, Origin and credentials the gate lets in,
where the relay's frame cursor finds frame boundaries in bytes split anywhere, and the relay
over in-memory streams (backpressure, what passes, how each side's going is told)."""

import itertools
import random

import pytest
import trio
from trio.testing import lockstep_stream_pair, memory_stream_pair, wait_all_tasks_blocked
from wsproto.frame_protocol import FrameProtocol

from tether.clients.web.relay import (
    LOST_DAEMON,
    PAGE_LEFT,
    FrameCursor,
    accept_key,
    close_frame,
    relay,
)
from tether.clients.web.security import Gate, Refused, is_loopback, is_wildcard


def headers(**values: str) -> list[tuple[bytes, bytes]]:
    return [(k.replace("_", "-").encode(), v.encode()) for k, v in values.items()]


def test_a_loopback_server_answers_to_its_loopback_names_with_its_port() -> None:
    gate = Gate("127.0.0.1", 8737, tls=False)
    for host in ["127.0.0.1:8737", "localhost:8737", "[::1]:8737", "LOCALHOST:8737"]:
        gate.check_site(headers(host=host, origin=f"http://{host.lower()}"))
    for host in ["127.0.0.1", "127.0.0.1:80", "evil.example:8737", "127.0.0.2:8737", ""]:
        with pytest.raises(Refused) as refused:
            gate.check_site(headers(host=host))
        assert refused.value.status == 403
    with pytest.raises(Refused):
        gate.check_site([])
    for origin in ["http://evil.example", "https://127.0.0.1:8737", "null", "http://127.0.0.1"]:
        with pytest.raises(Refused) as refused:
            gate.check_site(headers(host="127.0.0.1:8737", origin=origin))
        assert refused.value.status == 403


def test_a_server_on_another_address_answers_to_that_address_only() -> None:
    gate = Gate("100.64.1.2", 443, tls=True)
    assert gate.url.startswith("https://100.64.1.2:443/?token=")
    gate.check_site(headers(host="100.64.1.2", origin="https://100.64.1.2"))
    gate.check_site(headers(host="100.64.1.2:443"))
    with pytest.raises(Refused):
        gate.check_site(headers(host="localhost:443"))
    six = Gate("fd00::5", 9000, tls=True)
    assert six.url.startswith("https://[fd00::5]:9000/")
    six.check_site(headers(host="[fd00::5]:9000", origin="https://[fd00::5]:9000"))


def test_the_credential_is_the_cookie_or_the_bearer_token() -> None:
    gate = Gate("127.0.0.1", 8737, tls=False)
    cookie = gate.set_cookie().decode().split(";")[0]
    assert gate.credential_ok(headers(cookie=f"other=1; {cookie}"))
    assert gate.credential_ok(headers(authorization=f"Bearer {gate.token}"))
    assert not gate.credential_ok(headers(cookie=f"{gate.cookie_name}={gate.token}"))
    assert not gate.credential_ok(headers(authorization=f"Bearer {gate.secret}"))
    assert not gate.credential_ok(headers(cookie=f"tether_web_1={gate.secret}"))
    assert not gate.credential_ok([])
    with pytest.raises(Refused) as refused:
        gate.check_credential(headers(cookie="x=y"))
    assert refused.value.status == 401
    assert gate.token != gate.secret
    assert Gate("127.0.0.1", 8737, tls=False).token != gate.token
    assert "Secure" in Gate("127.0.0.1", 1, tls=True).set_cookie().decode()


def test_loopback_and_wildcard_addresses() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "10.0.0.1", "example.com", "::"])
    assert is_wildcard("0.0.0.0")
    assert is_wildcard("::")
    assert not is_wildcard("127.0.0.1")


def test_the_accept_key_is_the_rfcs() -> None:
    # RFC 6455 §1.3's example.
    assert accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("client", [True, False])
def test_the_frame_cursor_finds_every_boundary_however_the_bytes_are_split(client: bool) -> None:
    rng = random.Random(7)
    sender = FrameProtocol(client=client, extensions=[])
    frames: list[bytes] = []
    for size in [0, 1, 125, 126, 127, 65535, 65536, 70000, 3]:
        frames.append(bytes(sender.send_data("x" * size, fin=True)))
    frames.append(bytes(sender.ping(b"p")))
    frames.append(close_frame(1011, "gone", masked=client))
    stream = b"".join(frames)
    ends: set[int] = set()
    at = 0
    for frame in frames:
        at += len(frame)
        ends.add(at)
    for _ in range(20):
        cursor = FrameCursor()
        cuts = sorted({0, len(stream), *(rng.randrange(len(stream)) for _ in range(30))})
        cuts = sorted(set(cuts) | set(rng.sample(sorted(ends), 4)))
        for start, end in itertools.pairwise(cuts):
            cursor.feed(stream[start:end])
            assert cursor.between_frames == (end in ends), end
            assert cursor.closing == (end > len(stream) - len(frames[-1]))


def test_a_close_frame_made_here_is_one_a_websocket_reads() -> None:
    receiver = FrameProtocol(client=False, extensions=[])
    receiver.receive_bytes(close_frame(1001, "the page went away", masked=True))
    frame = next(iter(receiver.received_frames()))
    assert frame.payload == (1001, "the page went away")
    reader = FrameProtocol(client=True, extensions=[])
    reader.receive_bytes(close_frame(1011, "é" * 100, masked=False))
    code, reason = next(iter(reader.received_frames())).payload
    assert code == 1011
    assert isinstance(reason, str)
    assert len(reason.encode()) <= 123


def daemon_frame(text: str) -> bytes:
    return bytes(FrameProtocol(client=False, extensions=[]).send_data(text, fin=True))


def page_frame(text: str) -> bytes:
    return bytes(FrameProtocol(client=True, extensions=[]).send_data(text, fin=True))


def frames_read_by(client: bool, data: bytes) -> list[object]:
    """The frames a websocket end (`client` or server) reads from `data`, as (opcode, payload)."""
    reader = FrameProtocol(client=client, extensions=[])
    reader.receive_bytes(data)
    return [(frame.opcode.name, frame.payload) for frame in reader.received_frames()]


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    parts: list[bytes] = []
    while data := await stream.receive_some():
        parts.append(bytes(data))
    return b"".join(parts)


async def test_a_page_that_does_not_read_stops_the_relay_reading_the_daemon() -> None:
    page, page_side = lockstep_stream_pair()
    daemon_side, daemon = lockstep_stream_pair()
    frame = daemon_frame("x" * 1000)
    written = 0

    async def the_daemon_writes() -> None:
        nonlocal written
        for _ in range(10):
            await daemon.send_all(frame)
            written += 1
        await daemon.aclose()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay, page_side, b"", daemon_side, b"")
            nursery.start_soon(the_daemon_writes)
            await wait_all_tasks_blocked()
            # One frame read and held for the page; the daemon's next write waits.
            assert written == 1
            received = await read_all(page)
    assert written == 10
    assert received.startswith(frame * 10)
    assert frames_read_by(True, received)[-1] == ("CLOSE", (1011, LOST_DAEMON))


async def test_what_each_side_sends_reaches_the_other_unchanged_early_bytes_first() -> None:
    page, page_side = memory_stream_pair()
    daemon_side, daemon = memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                relay, page_side, page_frame("early"), daemon_side, daemon_frame("hello")
            )
            await page.send_all(page_frame("ping"))
            await daemon.send_all(daemon_frame("pong"))
            await wait_all_tasks_blocked()
            assert frames_read_by(False, bytes(await daemon.receive_some())) == [
                ("TEXT", "early"),
                ("TEXT", "ping"),
            ]
            assert frames_read_by(True, bytes(await page.receive_some())) == [
                ("TEXT", "hello"),
                ("TEXT", "pong"),
            ]
            # The daemon's close frame passes through, and nothing is added to it.
            closing = bytes(FrameProtocol(client=False, extensions=[]).close(1001, "stopping"))
            await daemon.send_all(closing)
            await daemon.aclose()
            assert frames_read_by(True, await read_all(page)) == [("CLOSE", (1001, "stopping"))]


async def test_a_page_that_vanishes_closes_the_daemon_connection_saying_so() -> None:
    page, page_side = memory_stream_pair()
    daemon_side, daemon = memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay, page_side, b"", daemon_side, b"")
            await page.send_all(page_frame("last words"))
            await page.aclose()
            received = await read_all(daemon)
    assert frames_read_by(False, received) == [
        ("TEXT", "last words"),
        ("CLOSE", (1001, PAGE_LEFT)),
    ]


async def test_a_daemon_that_vanishes_mid_frame_only_cuts_the_page_off() -> None:
    page, page_side = memory_stream_pair()
    daemon_side, daemon = memory_stream_pair()
    half = daemon_frame("y" * 500)[:300]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay, page_side, b"", daemon_side, b"")
            await daemon.send_all(half)
            await daemon.aclose()
            assert await read_all(page) == half
