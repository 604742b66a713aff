"""The scripted model server from the command line (also ``tether dev model-server``)::

    python -m tether.testing --script FILE [--host H] [--port P] [--port-file PATH]

prints ``tether model server listening on http://HOST:PORT/v1`` once ready and serves until
SIGTERM or SIGINT. As ``tether dev model-server`` it also says on stderr how to point tether at
that URL.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, cast

from tether.testing.script import load_script
from tether.testing.server import ModelServer


def _write_port_file(path: str, port: int) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    tmp.replace(target)


def main(
    argv: list[str] | None = None, *, prog: str = "python -m tether.testing", hint: bool = False
) -> int:
    """Serve the script `argv` names until SIGTERM or SIGINT; the exit code. With `hint`, a
    second line on stderr shows the environment that points tether at the server."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a scripted fake model (OpenAI chat completions, Anthropic Messages).",
    )
    parser.add_argument("--script", required=True, help="path of the JSON script")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--port-file", help="write the bound port to this file once listening")
    args = parser.parse_args(argv)
    script_path = cast(str, args.script)
    host = cast(str, args.host)
    port = cast(int, args.port)
    port_file = cast("str | None", args.port_file)

    try:
        script = load_script(script_path)
    except (OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous: dict[signal.Signals, Any] = {}
    if in_main_thread:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    server = ModelServer(script, host=host, port=port)
    try:
        try:
            server.start()
        except OSError as exc:
            print(f"{prog}: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        if port_file:
            _write_port_file(port_file, server.port)
        print(f"tether model server listening on {server.base_url}", flush=True)
        if hint:
            print(
                f"point tether at it: TETHER_BASE_URL={server.base_url} TETHER_MODEL=scripted"
                " (Ctrl-C stops it)",
                file=sys.stderr,
                flush=True,
            )
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
