"""A flood of connections that never send their websocket upgrade cannot shut authenticated
clients out: the daemon keeps at most a few such connections waiting, drops the oldest first,
and an authenticated client still connects and is answered, even with a small open-file
limit."""

import resource
import socket
from collections.abc import Iterator

import pytest

from tests.support import DaemonProcess
from tether.clients.core.rpc import Client
from tether.clients.core.websocket import WebSocket
from tether.protocol.methods import DAEMON_STATUS, INITIALIZE, Empty, InitializeParams

OPEN_FILES = 256
"""The daemon's open-file limit here (soft and hard), as under `ulimit -n 256`."""
FLOOD = 400
"""Half-open connections: more than the daemon could hold at once under that limit."""


@pytest.fixture
def flood(daemon: DaemonProcess) -> Iterator[list[socket.socket]]:
    resource.prlimit(daemon.proc.pid, resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    sockets: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            sockets.append(socket.create_connection(("127.0.0.1", daemon.port), timeout=5))
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def sees_eof(sock: socket.socket, timeout: float = 0.0) -> bool:
    """Whether the daemon has closed this connection: a read returns EOF (at once, or within
    `timeout` seconds)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (BlockingIOError, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def test_an_authenticated_client_is_answered_through_a_half_open_flood(
    daemon: DaemonProcess, flood: list[socket.socket]
) -> None:
    # Well under the handshake timeout (10 s): the client must not wait for a slot to free up.
    ws = WebSocket.connect(
        "127.0.0.1",
        daemon.port,
        headers={"Authorization": f"Bearer {daemon.token}"},
        timeout=5,
    )
    with Client(ws, daemon.info) as client:
        client.call(INITIALIZE, InitializeParams(client_name="through-the-flood"))
        status = client.call(DAEMON_STATUS, Empty())
        assert status.pid == daemon.proc.pid
    # The oldest were dropped (EOF), the newest still wait for their handshake.
    assert sees_eof(flood[0], timeout=5)
    dropped = [sees_eof(sock) for sock in flood]
    assert all(dropped[: FLOOD // 2])
    assert not any(dropped[-8:])
