"""`file/read` in-process: `Handlers` over real `Sessions` in a real git repository (so that a
worktree session has a root of its own), the files real files in a temporary folder."""

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.git_repo import make_repo
from tests.inprocess import running_sessions
from tests.unit.test_handlers import DaemonParts, Rig, created, rpc_error
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.file_read import MAX_AFTER, MAX_BEFORE, MAX_FILE_BYTES, MAX_LINE_CHARS
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode
from tether.protocol.methods import FileReadResult
from tether.testing import ModelServer

NUMBERED = "".join(f"line {n}\n" for n in range(1, 101))


@pytest.fixture
async def rig(tmp_path: Path, sqlite_store: Store, model_server: ModelServer) -> AsyncIterator[Rig]:
    workspace = make_repo(tmp_path / "project", "print('main')\n")
    processes = ProcessTable(record=tmp_path / "processes.json")
    with trio.fail_after(30):
        async with running_sessions(sqlite_store, workspace, model_server) as sessions:
            rig = Rig(DaemonParts(workspace, sessions, processes), model_server)
            try:
                yield rig
            finally:
                rig.close()


async def read(rig: Rig, **params: object) -> FileReadResult:
    client = await rig.client()
    result = await client.call("file/read", **params)
    assert isinstance(result, FileReadResult)
    return result


async def refusal(rig: Rig, **params: object) -> str:
    client = await rig.client()
    error = await rpc_error(client.call("file/read", **params))
    assert error.code == ErrorCode.INVALID_PARAMS
    return error.message


async def test_a_window_around_a_line(rig: Rig) -> None:
    src = rig.parts.workspace / "src"
    src.mkdir()
    (src / "numbers.txt").write_text(NUMBERED.replace("\n", "\r\n", 1))
    got = await read(rig, path="src/numbers.txt", line=50)
    assert (got.path, got.start_line, got.total_lines, got.truncated) == (
        "src/numbers.txt",
        30,
        100,
        False,
    )
    assert got.lines == [f"line {n}" for n in range(30, 91)]
    # Near the start and past the end the window stops at the file's edges; an absolute path
    # inside the root is the same file.
    first = await read(rig, path=str(src / "numbers.txt"), line=2, before=5, after=1)
    assert (first.start_line, first.lines) == (1, ["line 1", "line 2", "line 3"])
    last = await read(rig, path="src/numbers.txt", line=500, before=2, after=9)
    assert (last.start_line, last.lines) == (98, ["line 98", "line 99", "line 100"])


async def test_a_worktree_session_reads_its_own_root(rig: Rig) -> None:
    client = await rig.client()
    session_id = await created(client, isolation="worktree")
    session = await rig.parts.sessions.get(session_id)
    assert session.worktree is not None
    (Path(session.worktree.root) / "app.py").write_text("print('worktree')\n")
    mine = await read(rig, sessionId=session_id, path="app.py")
    theirs = await read(rig, path="app.py")
    assert (mine.lines, theirs.lines) == (["print('worktree')"], ["print('main')"])
    error = await rpc_error(client.call("file/read", sessionId="s_nope", path="app.py"))
    assert error.code == ErrorCode.SESSION_NOT_FOUND


async def test_nothing_outside_the_root_or_through_a_symlink_is_read(
    rig: Rig, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours\n")
    workspace = rig.parts.workspace
    (workspace / "link.txt").symlink_to(outside)
    (workspace / "inner.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "inner.txt")
    (workspace / "out").symlink_to(tmp_path)
    messages = [
        await refusal(rig, path=str(outside)),
        await refusal(rig, path="../secret.txt"),
        await refusal(rig, path="sub/../../secret.txt"),
        await refusal(rig, path="link.txt"),
        await refusal(rig, path="alias.txt"),
        await refusal(rig, path="out/secret.txt"),
        await refusal(rig, path="missing.txt"),
        await refusal(rig, path="."),
    ]
    assert "not inside" in messages[0]
    assert all("`..`" in m for m in messages[1:3])
    assert all("symlink" in m for m in messages[3:6])
    assert "does not exist" in messages[6]
    assert "not inside" in messages[7]
    assert not any("not yours" in m for m in messages)


@pytest.mark.parametrize("name", [".env", "config/.ENV.local", ".ssh/config", "deploy/id_rsa"])
async def test_a_credential_file_is_refused(rig: Rig, name: str) -> None:
    path = rig.parts.workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("TOKEN=hunter2\n")
    message = await refusal(rig, path=name)
    assert "credential" in message
    assert "hunter2" not in message


async def test_binary_and_huge_files_are_refused_and_the_window_is_bounded(rig: Rig) -> None:
    workspace = rig.parts.workspace
    (workspace / "blob.bin").write_bytes(b"abc\x00def\n")
    assert "binary" in await refusal(rig, path="blob.bin")
    with (workspace / "huge.txt").open("wb") as huge:
        huge.truncate(MAX_FILE_BYTES + 1)
    assert f"{MAX_FILE_BYTES + 1:,} bytes" in await refusal(rig, path="huge.txt")

    long_line = "y" * (MAX_LINE_CHARS * 3)
    (workspace / "many.txt").write_text("x\n" * 5000 + long_line + "\n")
    got = await read(rig, path="many.txt", line=2000, before=10_000, after=10_000)
    assert (got.start_line, len(got.lines)) == (2000 - MAX_BEFORE, MAX_BEFORE + 1 + MAX_AFTER)
    assert not got.truncated
    tail = await read(rig, path="many.txt", line=5001, before=0, after=0)
    assert (tail.lines, tail.truncated) == (["y" * MAX_LINE_CHARS], True)


async def test_a_fifo_is_not_waited_on(rig: Rig) -> None:
    os.mkfifo(rig.parts.workspace / "pipe")
    assert "not a regular file" in await refusal(rig, path="pipe")
