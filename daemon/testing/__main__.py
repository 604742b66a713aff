"""The scripted model server from the command line (also ``tether dev model-server``)::

    python -m tether.testing --script FILE [--host H] [--port P] [--port-file PATH]

prints ``tether model server listening on http://HOST:PORT/v1`` once ready and serves until
SIGTERM or SIGINT.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing",
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
        print(f"model_server: {exc}", file=sys.stderr)
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
            print(f"model_server: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        if port_file:
            _write_port_file(port_file, server.port)
        print(f"tether model server listening on {server.base_url}", flush=True)
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
