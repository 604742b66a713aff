"""`tether` paused just after it sent one request, so that a test's keystroke lands at a moment
it chose: `python -m tests.paused_cli METHOD FIFO ARGS...` runs the CLI with ARGS; once a
request for METHOD has gone to the daemon it writes `paused after METHOD` on stderr and blocks
reading FIFO until the test writes a line to it. The request and everything else are the real
client's; only the moment is held (a daemon slow to answer, or a CLI slow to import, would
leave the same gap)."""

import sys

from tether.clients.cli.main import main
from tether.clients.core.websocket import WebSocket


def pause_after(method: str, fifo: str) -> None:
    send = WebSocket.send
    needle = f'"method":"{method}"'.encode()

    def send_then_pause(self: WebSocket, message: str | bytes) -> None:
        send(self, message)
        data = message.encode() if isinstance(message, str) else message
        if needle in data:
            sys.stderr.write(f"paused after {method}\n")
            sys.stderr.flush()
            with open(fifo) as released:
                released.readline()

    WebSocket.send = send_then_pause


if __name__ == "__main__":
    pause_after(sys.argv[1], sys.argv[2])
    raise SystemExit(main(sys.argv[3:]))
