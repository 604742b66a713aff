"""`tether web`'s pure rules: which Host, Origin and credentials the gate lets in, and where
the relay's frame cursor finds frame boundaries in bytes split anywhere."""

import itertools
import random

import pytest
from wsproto.frame_protocol import FrameProtocol

from tether.clients.web.relay import FrameCursor, accept_key, close_frame
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
