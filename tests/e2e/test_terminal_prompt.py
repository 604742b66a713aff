"""`tether run` on a terminal asks y / a(lways) / n for approvals (stdin is a real pty)."""

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    command_step,
)
from tether.testing import ModelServer


@pytest.mark.shared_daemon
@pytest.mark.parametrize(("answer", "ran"), [("y", True), ("n", False)])
def test_run_asks_on_its_terminal(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    answer: str,
    ran: bool,
) -> None:
    model_server.set_script({"steps": [command_step("echo typed-answer"), {"text": "done"}]})
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", "run", "-w", str(workspace), "go"],
        env=home.env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(slave)
    stderr: list[str] = []
    prompted = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        buffer = ""
        while chunk := proc.stderr.read(1):
            buffer += chunk
            if "[N]o (Enter = no): " in buffer:
                prompted.set()
        stderr.append(buffer)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert prompted.wait(20), "no approval prompt on the terminal"
        os.write(master, f"{answer}\n".encode())
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        reader.join(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert "done" in out
    result = model_server.requests[1]["messages"][-1]["content"]
    if ran:
        assert "typed-answer" in result
    else:
        assert "denied at the terminal" in result
