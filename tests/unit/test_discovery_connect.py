"""`discovery.connect` looks again when what it found does not take the connection: here a
port that accepts and closes before the upgrade is answered, as an ssh forward does when the
remote daemon behind it has died since `daemon ensure` named it. `tether run`'s prelude, which
connects before the typed client, leaves such a port to it."""

import socket
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest

from tests.support import DaemonProcess
from tether.clients.core.discovery import (
    DaemonUnavailable,
    Located,
    connect,
    forget_remote,
    reach_remotely,
)
from tether.clients.core.prelude import Prelude
from tether.protocol.discovery import DiscoveryInfo

pytestmark = pytest.mark.shared_daemon


@contextmanager
def closing_port() -> Generator[tuple[int, list[int]]]:
    """A port on 127.0.0.1 that accepts each connection and closes it at once; the list
    counts the connections taken."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[int] = []
    done = threading.Event()

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            if done.is_set():
                conn.close()
                return
            # Counted before the close: the client's side returns at the close, and the test
            # reads the count right after.
            taken.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], taken
    finally:
        done.set()
        socket.create_connection(listener.getsockname()).close()  # wakes the accept
        thread.join(timeout=5)
        listener.close()


class Answers:
    """A remote locator answering with the infos given, one a call (the last repeats)."""

    def __init__(self, *infos: DiscoveryInfo) -> None:
        self.infos = list(infos)
        self.calls = 0
        self.known: DiscoveryInfo | None = None
        """What `discovery` answers (None: nothing known to serve)."""

    def locate(self, *, autostart: bool) -> Located:
        info = self.infos[min(self.calls, len(self.infos) - 1)]
        self.calls += 1
        return Located(info, started=False)

    def discovery(self) -> bytes | None:
        return None if self.known is None else msgspec.json.encode(self.known)


@contextmanager
def reached(workspace: Path, locator: Answers) -> Generator[None]:
    reach_remotely(workspace, locator)
    try:
        yield
    finally:
        forget_remote(workspace)


def live_info(daemon: DaemonProcess) -> DiscoveryInfo:
    info = daemon.home.read_discovery(daemon.workspace)
    assert info is not None
    return info


def test_a_port_closing_during_the_handshake_is_located_again(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    live = live_info(daemon)
    with closing_port() as (port, taken):
        locator = Answers(msgspec.structs.replace(live, port=port), live)
        with reached(tmp_path / "elsewhere", locator):
            ws, found = connect(tmp_path / "elsewhere")
    with ws:
        assert (found.info.port, locator.calls, len(taken)) == (live.port, 2, 1)
        ws.send('{"jsonrpc": "2.0", "id": 1, "method": "no/such"}')
        reply = msgspec.json.decode(ws.recv(timeout=10))
    assert reply["id"] == 1
    assert "error" in reply, "the daemon itself answered"


def test_a_rejected_handshake_is_not_tried_again(daemon: DaemonProcess, tmp_path: Path) -> None:
    wrong_token = msgspec.structs.replace(live_info(daemon), token="not-the-token")
    locator = Answers(wrong_token, live_info(daemon))
    with reached(tmp_path / "elsewhere", locator), pytest.raises(DaemonUnavailable) as caught:
        connect(tmp_path / "elsewhere")
    assert "refused the connection" in str(caught.value)
    assert locator.calls == 1


def test_the_prelude_leaves_a_port_closing_during_the_handshake_to_the_ordinary_way(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    with closing_port() as (port, taken):
        locator = Answers(live_info(daemon))
        locator.known = msgspec.structs.replace(live_info(daemon), port=port)
        with reached(tmp_path / "elsewhere", locator):
            assert Prelude.open(tmp_path / "elsewhere", client_name="t") is None
    assert len(taken) == 1, "the prelude did try the port"
