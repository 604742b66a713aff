"""What the command sandbox costs a command: `true` run to completion by run_to_completion (the
foreground path of run_command, output pump and group stop included), unconfined and under
bubblewrap, without and with the network (a namespace of its own connected by slirp4netns),
in a temporary workspace. The first sandboxed run also tries the sandbox once (the
check every new sandbox gets); it is reported apart.

Usage: python bench/sandbox_overhead.py [--runs N]
"""

import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

from _harness import load_line, machine_line, median, ms, row, runs_argument, verdict
from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import run_to_completion
from tether.daemon.procs.sandbox import Sandbox

ADDED_TARGET = 0.03
"""Seconds the sandbox may add to a command (median)."""


async def once(workspace: Path, sandbox: Sandbox | None) -> float:
    started = time.monotonic()
    done = await run_to_completion(
        "true",
        cwd=workspace,
        env=command_env(),
        time_limit=30,
        on_output=lambda _text: None,
        head=100,
        tail=100,
        sandbox=sandbox,
    )
    assert done.exit_code == 0, done.output.render(100, 100)
    return time.monotonic() - started


async def measure(workspace: Path, runs: int) -> None:
    sandbox = Sandbox(workspace=workspace)
    first = await once(workspace, sandbox)
    plain = [await once(workspace, None) for _ in range(runs)]
    boxed = [await once(workspace, sandbox) for _ in range(runs)]
    networked = Sandbox(workspace=workspace, network=True)
    online: list[float] = []
    if shutil.which(networked.slirp4netns):
        await once(workspace, networked)
        online = [await once(workspace, networked) for _ in range(runs)]
    print(f"\n`true` to completion, median of {runs}")
    row("unconfined", ms(median(plain)))
    row("in the sandbox", ms(median(boxed)))
    if online:
        # Its own user and network namespace (making one costs ~10 ms), slirp4netns, the
        # launcher's FIFOs.
        row("in the sandbox, network allowed", ms(median(online)))
    else:
        row("in the sandbox, network allowed", "slirp4netns is not installed")
    added = median(boxed) - median(plain)
    target = f"< {ADDED_TARGET * 1000:g} ms"
    row("added by the sandbox", ms(added), target, verdict(added, ADDED_TARGET))
    row("the first sandboxed run (with its check)", ms(first))


def main() -> None:
    runs = runs_argument(__doc__, 30)
    if shutil.which("bwrap") is None:
        sys.exit("bwrap is not installed: `bash .ci/install-system` installs it")
    print(f"sandbox overhead: {machine_line()}\n{load_line()}")
    with tempfile.TemporaryDirectory() as folder:
        trio.run(measure, Path(folder).resolve(), runs)


if __name__ == "__main__":
    main()
