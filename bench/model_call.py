"""tether's own share of one model call: the OpenAI client against the scripted model server
on loopback (its own process, as in the daemon's case: a server thread here would contend
for the GIL), answering a one-tool-call step (as a read step's call is).

Prints µs per call (each round's mean, and their min and median); `--profile` runs the calls
under cProfile and prints the top functions by own time. The server's answer is included, so
compare figures from the same machine.

    uv run --frozen python bench/model_call.py [--calls 300] [--rounds 5] [--profile]
"""

import argparse
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import trio

from tether.daemon.providers.base import Message, ModelRequest, QuietCallbacks, ToolSet, ToolSpec
from tether.daemon.providers.openai import OpenAIChatClient

STEP = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}
SCRIPT = {"loop": True, "steps": [STEP]}


def request() -> ModelRequest:
    tools = ToolSet(
        specs=[
            ToolSpec(
                name=name,
                description=f"The {name} tool.",
                parameters=msgspec.Raw(
                    b'{"type":"object","properties":{"path":{"type":"string"}}}'
                ),
            )
            for name in ("read_file", "list_dir", "run_command", "write_file")
        ]
    )
    messages = [
        Message(role="system", content="You are a coding agent. " * 40),
        Message(role="user", content="Read the README."),
    ]
    return ModelRequest(messages=messages, tools=tools)


async def calls(client: OpenAIChatClient, req: ModelRequest, count: int) -> float:
    callbacks = QuietCallbacks()
    start = time.perf_counter()
    for _ in range(count):
        await client.complete(req, callbacks)
    return (time.perf_counter() - start) / count


@contextmanager
def model_server() -> Generator[str]:
    """The scripted server in a subprocess; yields its OpenAI base URL."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "script.json")
        script.write_text(json.dumps(SCRIPT))
        port_file = Path(tmp, "port")
        command = [sys.executable, "-P", "-m", "tether.testing", "--script", str(script)]
        server = subprocess.Popen([*command, "--port-file", str(port_file)])
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the model server did not start")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{int(port_file.read_text())}/v1"
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with model_server() as base_url:

        async def run() -> None:
            client = OpenAIChatClient(base_url=base_url, model="m", tool_mode="native")
            req = request()
            await calls(client, req, 20)  # warm: connection, caches
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                await calls(client, req, args.calls)
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(35)
            else:
                per_call = [await calls(client, req, args.calls) for _ in range(args.rounds)]
                shown = " ".join(f"{s * 1e6:.0f}" for s in per_call)
                print(
                    f"µs per call: min {min(per_call) * 1e6:.0f}"
                    f" median {statistics.median(per_call) * 1e6:.0f}  ({shown})"
                )
            await client.aclose()

        trio.run(run)


if __name__ == "__main__":
    main()
