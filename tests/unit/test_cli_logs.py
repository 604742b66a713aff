"""`tether daemon logs`: the log files read without a daemon, drawn readably or raw, filtered
by level and session, and followed across the daemon writer's own rotation."""

import json
import os
import select
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import Home, cli
from tether.daemon.logs.file import LogFile

SESSION = "s_60d1fd0db7120d26"
OTHER = "s_99aa11bb22cc33dd"
TURN = "t_696e580dcdd71985"


def line(msg: str, level: str = "info", **fields: Any) -> bytes:
    head = {"ts": "2026-12-02T00:52:31.181364Z", "level": level, "logger": "turn.loop"}
    return json.dumps({**head, "msg": msg, **fields}, separators=(",", ":")).encode() + b"\n"


@pytest.fixture
def user(tmp_path: Path) -> Home:
    return Home(tmp_path / "user")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def write(home: Home, workspace: Path, *lines: bytes, max_bytes: int = 10**6) -> LogFile:
    path = home.log_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = LogFile(path, max_bytes=max_bytes)
    for one in lines:
        log.write(one)
    return log


def logs(home: Home, workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(home, "daemon", "logs", "-w", str(workspace), *args)


def test_lines_are_drawn_with_local_time_short_ids_and_fields(user: Home, project: Path) -> None:
    write(
        user,
        project,
        line(
            "tool call",
            conn="c3",
            session=SESSION,
            turn=TURN,
            tool="run_command",
            outcome="completed",
            ms=17.5,
            note="two words",
            exit_code=None,
        ),
        line("the turn failed", "error", traceback="Traceback:\n  File x\nValueError: boom"),
    ).close()
    shown = logs(user, project)
    assert shown.returncode == 0, shown.stderr
    when = datetime.fromisoformat("2026-12-02T00:52:31.181364Z").astimezone()
    stamp = when.strftime("%Y-%m-%d %H:%M:%S.181")
    assert shown.stdout.splitlines() == [
        f"{stamp} INFO    c3 s_60d1fd0d t_696e580d turn.loop: tool call tool=run_command"
        ' outcome=completed ms=17.5 note="two words"',
        f"{stamp} ERROR   turn.loop: the turn failed",
        "  traceback:",
        "    Traceback:",
        "      File x",
        "    ValueError: boom",
    ]


def test_level_keeps_lines_at_or_above_it(user: Home, project: Path) -> None:
    write(
        user,
        project,
        line("a", "debug"),
        line("b", "info"),
        line("c", "warning"),
        line("d", "error"),
    ).close()
    shown = logs(user, project, "--level", "warning", "--json")
    assert [json.loads(one)["msg"] for one in shown.stdout.splitlines()] == ["c", "d"]
    everything = logs(user, project, "--json")
    assert len(everything.stdout.splitlines()) == 4


def test_session_keeps_one_sessions_lines_by_id_or_prefix(user: Home, project: Path) -> None:
    write(
        user,
        project,
        line("mine", session=SESSION),
        line("none"),
        line("theirs", session=OTHER),
    ).close()
    for ref in (SESSION, SESSION[:6]):
        shown = logs(user, project, "--session", ref, "--json")
        assert [json.loads(one)["msg"] for one in shown.stdout.splitlines()] == ["mine"]


def test_json_prints_the_lines_as_written_across_rotated_files(user: Home, project: Path) -> None:
    lines = [line(f"m{i}", n=i) for i in range(12)]
    # Small files: the writer rotates every few lines and keeps three old files.
    log = write(user, project, *lines, max_bytes=max(map(len, lines)) * 3)
    log.close()
    assert user.log_path(project).with_name(user.log_path(project).name + ".3").exists()
    shown = logs(user, project, "--json")
    assert shown.stdout.encode() == b"".join(lines)
    last = logs(user, project, "--json", "-n", "2")
    assert last.stdout.encode() == b"".join(lines[-2:])


def test_a_line_that_is_not_json_is_shown_unless_a_filter_asks(user: Home, project: Path) -> None:
    write(user, project, b"2026-01-01 INFO old text line\n", line("new")).close()
    assert logs(user, project).stdout.splitlines()[0] == "2026-01-01 INFO old text line"
    assert len(logs(user, project, "--json").stdout.splitlines()) == 1
    assert len(logs(user, project, "--level", "info").stdout.splitlines()) == 1


def test_no_log_yet_says_where_it_would_be(user: Home, project: Path) -> None:
    shown = logs(user, project)
    assert shown.returncode == 2
    assert str(user.log_path(project)) in shown.stderr


def test_the_log_options_belong_to_logs_alone(user: Home, project: Path) -> None:
    shown = cli(user, "daemon", "status", "--level", "info", "-w", str(project))
    assert shown.returncode == 2
    assert "--level: only `tether daemon logs` takes this" in shown.stderr


def test_follow_prints_new_lines_across_a_rotation(user: Home, project: Path) -> None:
    first = line("before", n=0)
    log = write(user, project, first, max_bytes=len(first) * 2)
    command = ["daemon", "logs", "-f", "--json", "-w", str(project)]
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", *command],
        env=user.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert read_line(proc.stdout) == first
        # Each write past two lines rotates the file under the follower.
        sent = [line("after", n=i) for i in range(1, 6)]
        for one in sent:
            log.write(one)
            assert read_line(proc.stdout) == one
        assert user.log_path(project).with_name(user.log_path(project).name + ".2").exists()
    finally:
        log.close()
        proc.terminate()
        proc.communicate(timeout=10)


def read_line(stream: Any, timeout: float = 10.0) -> bytes:
    """One line of `stream`, or a failure after `timeout` seconds without one."""
    fd = stream.fileno()
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"no line within {timeout} s (so far {data!r})"
        chunk = os.read(fd, 1)
        assert chunk, f"the stream ended (so far {data!r})"
        data += chunk
    return data


def test_a_follow_with_nothing_to_print_ends_when_its_reader_is_gone(
    user: Home, project: Path
) -> None:
    """As over `tether --remote … daemon logs -f` whose ssh session ended: no line comes to
    fail a write, and the follower still ends instead of waiting on for ever."""
    log = write(user, project, line("before"))
    command = ["daemon", "logs", "-f", "--json", "-w", str(project)]
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "tether.clients.cli.main", *command],
        env=user.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert read_line(proc.stdout) == line("before")
        proc.stdout.close()  # the reader goes; the log stays quiet
        assert proc.wait(timeout=10) == 0
    finally:
        log.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
