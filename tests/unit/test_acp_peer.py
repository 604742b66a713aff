"""The ACP stdio transport (`tether.clients.acp.peer`) over real pipes: bad lines get an
error and lose nothing, requests to the editor are answered or withdrawn."""

import os
import select
import threading
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, BinaryIO

import msgspec
import pytest

from tether.clients.acp.peer import Abandoned, AcpError, Peer

TIMEOUT = 10.0


class Echo:
    def __init__(self) -> None:
        self.notified: list[tuple[str, Any]] = []

    def request(self, method: str, params: Any) -> object:
        if method == "fail":
            raise AcpError(-32602, "no", {"why": "asked to"})
        if method == "crash":
            raise RuntimeError("bug")
        return {"method": method, "params": params}

    def notify(self, method: str, params: Any) -> None:
        self.notified.append((method, params))


class Pipes:
    def __init__(self, to_peer: BinaryIO, from_peer: BinaryIO) -> None:
        self.to_peer = to_peer
        self.from_peer = from_peer

    def send(self, line: bytes) -> None:
        self.to_peer.write(line + b"\n")
        self.to_peer.flush()

    def read(self) -> dict[str, Any]:
        """The next line the peer wrote (each is written whole, in one write)."""
        readable, _, _ = select.select([self.from_peer], [], [], TIMEOUT)
        assert readable, f"nothing from the peer within {TIMEOUT} s"
        line = self.from_peer.readline()
        assert line, "the peer closed its output"
        message = msgspec.json.decode(line)
        assert isinstance(message, dict)
        return message  # pyright: ignore[reportUnknownVariableType]


@contextmanager
def serving(handler: Echo) -> Generator[tuple[Peer, Pipes]]:
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    reader, writer = os.fdopen(in_read, "rb"), os.fdopen(out_write, "wb")
    peer = Peer(reader, writer)
    closed = threading.Event()
    thread = threading.Thread(target=peer.serve, args=(handler, closed.set), daemon=True)
    thread.start()
    # Unbuffered: `select` then sees every byte not read yet.
    to_peer, from_peer = os.fdopen(in_write, "wb"), os.fdopen(out_read, "rb", buffering=0)
    try:
        yield peer, Pipes(to_peer, from_peer)
    finally:
        to_peer.close()
        assert closed.wait(TIMEOUT), "serve did not end with its input"
        thread.join(TIMEOUT)
        writer.close()
        from_peer.close()
        reader.close()


def test_bad_lines_are_answered_and_the_next_request_still_is() -> None:
    handler = Echo()
    with serving(handler) as (_, pipes):
        pipes.send(b"{not json")
        assert pipes.read()["error"]["code"] == -32700
        pipes.send(b'{"jsonrpc": "2.0", "id": 1, "method": "fail"}')
        assert pipes.read() == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32602, "message": "no", "data": {"why": "asked to"}},
        }
        pipes.send(b'{"jsonrpc": "2.0", "id": 2, "method": "crash"}')
        crashed = pipes.read()
        assert (crashed["id"], crashed["error"]["code"]) == (2, -32603)
        pipes.send(b'{"jsonrpc": "2.0", "method": "note", "params": {"a": 1}}')
        pipes.send(b'{"jsonrpc": "2.0", "id": "x", "method": "echo", "params": [1]}')
        assert pipes.read() == {
            "jsonrpc": "2.0",
            "id": "x",
            "result": {"method": "echo", "params": [1]},
        }
    assert handler.notified == [("note", {"a": 1})]


def test_a_request_to_the_editor_is_answered_or_withdrawn() -> None:
    with serving(Echo()) as (peer, pipes):
        asked = peer.send_request("session/request_permission", {"n": 1})
        request = pipes.read()
        assert (request["method"], request["params"]) == ("session/request_permission", {"n": 1})
        pipes.send(msgspec.json.encode({"jsonrpc": "2.0", "id": request["id"], "result": 7}))
        assert asked.wait() == 7

        withdrawn = peer.send_request("session/request_permission", {"n": 2})
        second = pipes.read()
        peer.abandon(withdrawn, "answered elsewhere")
        assert pipes.read() == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": second["id"]},
        }
        with pytest.raises(Abandoned):
            withdrawn.wait()
        # The editor's late answer is ignored; an error answer reaches its waiter.
        pipes.send(msgspec.json.encode({"jsonrpc": "2.0", "id": second["id"], "result": 1}))
        refused = peer.send_request("x", None)
        third = pipes.read()
        error = {"code": -32601, "message": "nope"}
        pipes.send(msgspec.json.encode({"jsonrpc": "2.0", "id": third["id"], "error": error}))
        with pytest.raises(AcpError) as raised:
            refused.wait()
        assert raised.value.code == -32601
        pending = peer.send_request("y", None)
        pipes.read()
    with pytest.raises(Abandoned):
        pending.wait()  # the input ended: nobody will answer
