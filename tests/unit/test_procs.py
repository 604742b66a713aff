"""The process table and the process-tree machinery, with real subprocesses."""

import os
from pathlib import Path

import pytest
import trio

from tests.support import alive, group_survivors, require_program
from tether.daemon.procs.env import command_env
from tether.daemon.procs.groups import kill_tree, live_members
from tether.daemon.procs.output import (
    OutputBuffer,
    OutputDecoder,
    collapse_carriage_returns,
    strip_ansi,
)
from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.procs.table import MAX_TAIL, MAX_UNREAD, ProcessTable, ProcessTableClosed
from tether.daemon.truncate import cut_marker

GRACE = 0.5
IGNORES_TERM = "trap '' TERM; sleep 300 & sleep 300 & wait"


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_exited_unreaped(pid: int) -> None:
    """Wait until child `pid` has exited, without reaping it: its pidfd turns readable when
    the process becomes a zombie (`wait` would reap it)."""
    fd = os.pidfd_open(pid)
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
    assert state(pid) == "Z"


async def wait_members(pgid: int, count: int) -> None:
    with trio.fail_after(10):
        while len(live_members(pgid)) < count:  # noqa: ASYNC110 (nothing to wait on but /proc)
            await trio.sleep(0.02)


@pytest.fixture(params=["unconfined", "sandboxed"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Sandbox | None:
    """Each test that takes it runs twice: as it is, and in the command sandbox (bubblewrap),
    whose tree holds two more members: bwrap and the sandbox's pid 1."""
    if request.param == "unconfined":
        return None
    require_program("bwrap", "the command sandbox runs commands under bubblewrap")
    return Sandbox(workspace=tmp_path.resolve())


def extra(sandbox: Sandbox | None) -> int:
    """Members a sandboxed tree has beside the command's own: bwrap and the pid 1 shell."""
    return 0 if sandbox is None else 2


async def test_serve_cancellation_stops_every_tree(tmp_path: Path, sandbox: Sandbox | None) -> None:
    table = ProcessTable(grace=GRACE)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            first = await table.start(IGNORES_TERM, tmp_path, command_env(), "s1", sandbox)
            second = await table.start("sleep 300", tmp_path, command_env(), "s2", sandbox)
            await wait_members(first.pid, 3 + extra(sandbox))
            await wait_members(second.pid, 1 + extra(sandbox))
            nursery.cancel_scope.cancel()
    for managed in (first, second):
        assert managed.done.is_set()
        assert managed.status == "killed"
        assert live_members(managed.pid) == []
        assert group_survivors(managed.pid) == []
    with pytest.raises(ProcessTableClosed):
        await table.start("true", tmp_path, command_env())


# Cleans up for a moment when asked to stop, then exits 0; it says when it starts cleaning.
CLEANS_UP = "trap 'echo cleaning > cleaning; sleep 0.1; exit 0' TERM; sleep 300 & wait"


async def test_shutdown_stops_everything_and_kill_escalates(
    tmp_path: Path, sandbox: Sandbox | None
) -> None:
    table = ProcessTable(grace=GRACE)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            stubborn = await table.start(IGNORES_TERM, tmp_path, command_env(), "", sandbox)
            polite = await table.start("sleep 300", tmp_path, command_env(), "", sandbox)
            tidy = await table.start(CLEANS_UP, tmp_path, command_env(), "", sandbox)
            await wait_members(stubborn.pid, 3 + extra(sandbox))
            await wait_members(tidy.pid, 2 + extra(sandbox))
            await table.shutdown()
            assert [info.status for info in table.list()] == ["killed"] * 3
            # SIGTERM first, and the grace to act on it: the tidy shell finished cleaning up
            # and exited by itself; only what ignored SIGTERM met SIGKILL.
            assert (tmp_path / "cleaning").exists()
            exits = {info.id: info.exit_code for info in table.list()}
            # In the sandbox the status is the pid 1 shell's: a signal N reads as 128 + N,
            # except the SIGKILL that bwrap itself met.
            terminated = -15 if sandbox is None else 128 + 15
            assert (exits[tidy.id], exits[polite.id], exits[stubborn.id]) == (0, terminated, -9)
            assert group_survivors(stubborn.pid) == []
            assert not alive(polite.pid)
            with pytest.raises(KeyError):
                await table.kill("p42")
            await table.kill(polite.id)  # already ended: nothing to do
            nursery.cancel_scope.cancel()


async def test_unread_output_is_bounded(tmp_path: Path) -> None:
    table = ProcessTable(grace=GRACE)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            size = MAX_UNREAD + 50_000
            managed = await table.start(
                f"head -c {size} /dev/zero | tr '\\0' y; printf END", tmp_path, command_env()
            )
            await managed.done.wait()
            text = table.read_new_output(managed.id)
            assert text.startswith("[… 50,003 earlier characters dropped …]\n")
            assert text.endswith("END")
            assert len(text.split("\n", 1)[1]) == MAX_UNREAD
            assert table.read_new_output(managed.id) == ""
            nursery.cancel_scope.cancel()


async def test_the_tail_for_clients_leaves_the_model_s_unread_output_alone(tmp_path: Path) -> None:
    table = ProcessTable(grace=GRACE)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(table.serve)
            managed = await table.start("printf 'one\\ntwo\\n'", tmp_path, command_env())
            await managed.done.wait()
            assert managed.tail(4000) == ("one\ntwo\n", False)
            assert managed.tail(4) == ("two\n", True)
            assert managed.tail(0) == ("", True)
            assert table.read_new_output(managed.id) == "one\ntwo\n"  # still all unread
            assert managed.tail(4000) == ("one\ntwo\n", False)  # the model's read took none

            big = await table.start(
                f"head -c {MAX_TAIL + 10} /dev/zero | tr '\\0' y; printf END",
                tmp_path,
                command_env(),
            )
            await big.done.wait()
            text, truncated = big.tail(10**6)
            assert (len(text), truncated, text[-3:]) == (MAX_TAIL, True, "END")
            nursery.cancel_scope.cancel()


async def test_kill_tree_of_an_empty_group_does_nothing() -> None:
    process = await trio.lowlevel.open_process(["true"], start_new_session=True)
    with trio.fail_after(10):
        await process.wait()
        assert await kill_tree(process.pid) is False


async def test_live_members_ignores_zombies() -> None:
    process = await trio.lowlevel.open_process(["true"], start_new_session=True)
    with trio.fail_after(10):
        # Not reaped yet: a zombie, which no longer counts.
        await wait_exited_unreaped(process.pid)
        assert live_members(process.pid) == []
        await process.wait()


def test_decoder_strips_escapes_split_across_chunks() -> None:
    decoder = OutputDecoder()
    parts = [b"plain \x1b[3", b"1mred\x1b", b"[0m \xe2\x82", b"\xac \x1b]0;ti", b"tle\x07end"]
    text = "".join(decoder.feed(part) for part in parts) + decoder.flush()
    assert text == "plain red € end"


def test_strip_ansi_and_carriage_returns() -> None:
    assert strip_ansi("\x1b[1;32mok\x1b[0m\x1b(B\x07 done\x1b[K\t\n") == "ok done\t\n"
    assert collapse_carriage_returns("10%\r50%\r100%\nnext\r\n") == "100%\nnext\n"


def test_output_buffer_keeps_head_and_tail() -> None:
    buffer = OutputBuffer(head=5, tail=10)
    for chunk in ["abc", "defgh", "ijklmnopqrstu", "vwxyz" * 10, "0123456789"]:
        buffer.append(chunk)
    assert buffer.total == 81
    assert buffer.render(5, 10) == "abcde" + cut_marker(66) + "0123456789"
    assert buffer.render(2, 3) == "ab" + cut_marker(76) + "789"
    small = OutputBuffer(head=5, tail=10)
    small.append("short")
    small.append(" text")
    assert small.render(5, 10) == "short text"


def test_command_env_removes_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    env = command_env({"HOME": "/h", "API_TOKEN": "x", "aws_secret_access_key": "y", "PATH": "/b"})
    assert env["HOME"] == "/h"
    assert env["PATH"] == "/b"
    assert "API_TOKEN" not in env
    assert "aws_secret_access_key" not in env
    assert env["NO_COLOR"] == "1"
    monkeypatch.setenv("SOME_PASSWORD", "z")
    assert "SOME_PASSWORD" not in command_env()
    assert command_env()["PATH"] == os.environ["PATH"]


async def test_a_group_left_with_only_zombies_counts_as_gone() -> None:
    # killpg still finds a zombie member: only the occasional look at /proc tells it apart,
    # well before the (long) grace period would end.
    process = await trio.lowlevel.open_process(["true"], start_new_session=True)
    with trio.fail_after(10):
        await wait_exited_unreaped(process.pid)
        assert await kill_tree(process.pid, grace=60) is True
        await process.wait()
