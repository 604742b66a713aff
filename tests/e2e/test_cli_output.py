"""`tether run` as a person sees it, against the real daemon and the scripted model: under a
real pseudo-terminal a failing command shows ✗ and its exit code and an edit its coloured
diff; with NO_COLOR not one escape sequence; into a file only the answer, without rich."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, create_session
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

SGR = re.compile(r"\x1b\[[0-9;]*m")


def script(path: str) -> dict[str, object]:
    """A failing command, then a new file at `path` (each test its own: the daemon is shared),
    then the answer."""
    return {
        "steps": [
            {
                "tool_calls": [
                    {
                        "name": "run_command",
                        "arguments": {"command": "echo boom; exit 3", "description": "fail"},
                    }
                ]
            },
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": path, "content": "hello\n"}}
                ]
            },
            {"text": "The **answer** is ready.", "chunks": 3},
        ]
    }


FAILED_LINE = (
    r"✗ run_command\(command='echo boom; exit 3', description='fail'\) exit 3( · \d+\.\d s)?"
)
CLI = [sys.executable, "-P", "-m", "tether.clients.cli.main"]
RUN = ["run", "--permission-mode", "auto", "-w"]


def run_on_a_terminal(home: Home, workspace: Path, *, env: dict[str, str]) -> bytes:
    """Everything `tether run` writes to its terminal (stdin, stdout and stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [*CLI, *RUN, str(workspace), "go"],
        env={**home.env, "TERM": "xterm-256color", **env},
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    received = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: every writer has exited
                break
            if not chunk:
                break
            received += chunk
        assert proc.wait(timeout=30) == 0, received.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return received


def test_on_a_terminal_a_failing_command_and_an_edit_are_shown(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(script("shown.txt"))
    raw = run_on_a_terminal(home, workspace, env={}).decode()
    text = SGR.sub("", raw)
    assert re.search(FAILED_LINE + "\r", text)
    assert "  │ boom" in text
    assert "\x1b[1;31m✗ \x1b[0m" in raw
    assert "✓ write_file(path='shown.txt', content='hello\\n')" in text
    assert "\x1b[32m+hello\x1b[0m" in raw  # the diff, coloured
    assert "\x1b[1m+++ b/shown.txt\x1b[0m" in raw
    assert "\x1b[1manswer\x1b[0m is ready." in raw  # Markdown, rendered


def test_with_no_color_a_terminal_gets_no_escape_codes(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(script("no-color.txt"))
    raw = run_on_a_terminal(home, workspace, env={"NO_COLOR": "1"})
    assert b"\x1b" not in raw
    text = raw.decode()
    assert "✗ run_command(command='echo boom; exit 3', description='fail') exit 3" in text
    assert "+hello" in text
    assert "The **answer** is ready." in text


def test_into_a_file_only_the_answer_and_rich_is_not_imported(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script(script("piped.txt"))
    answer = tmp_path / "answer.md"
    with answer.open("wb") as out:
        result = subprocess.run(
            [sys.executable, "-X", "importtime", *CLI[1:], *RUN, str(workspace), "go"],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert answer.read_text() == "The **answer** is ready.\n"
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "tether.clients.cli.render.renderer" in imported  # the import log is complete
    assert not [name for name in imported if name.split(".")[0] in ("rich", "markdown_it")]
    shown = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert re.fullmatch(FAILED_LINE, shown[0])
    assert shown[1] == "  │ boom"
    assert "+++ b/piped.txt" in shown


def test_a_closed_stdout_ends_the_command_quietly(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    """`tether sessions | head -1`: once the reader is gone the command stops, says nothing
    and exits 0, as `daemon logs -f` does; it is not the daemon's connection that broke."""
    with daemon.client() as client:
        create_session(client)  # a session to list
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first line
    try:
        result = subprocess.run(
            [*CLI, "sessions", "-w", str(workspace)],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")
