"""Writing a user's file atomically: the helper on its own (a writer that fails midway, modes,
symlinks), and edit_file, write_file and undo writing through it on real files."""

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
import trio

from tether.daemon.sessions.store import Store
from tether.daemon.sessions.undo import TurnChanges, undo_turn
from tether.daemon.tools.atomic_write import atomic_write, write_all
from tether.daemon.tools.base import ReadVersions, ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry, ToolResult

REGISTRY = ToolRegistry(default_tools())


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def reader_of(path: Path) -> BinaryIO:
    """An open handle on the file as it is now, as another program reading it would hold."""
    return path.open("rb")


def half_then_disk_full(fd: int, data: bytes) -> None:
    write_all(fd, data[: len(data) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "state" / "tether.db")
    store.open()
    yield store
    store.close()


async def call(ctx: ToolContext, tool: str, **args: object) -> ToolResult:
    params = REGISTRY.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(10):
        return await REGISTRY.run(tool, params, ctx)


async def edit(ctx: ToolContext, path: str, old: str, new: str) -> None:
    assert (await call(ctx, "read_file", path=path)).status == "completed"
    result = await call(ctx, "edit_file", path=path, old_string=old, new_string=new)
    assert result.status == "completed", result.output


# --- the helper -------------------------------------------------------------------------------


def test_a_write_failing_midway_leaves_the_file_and_no_temporary(ws: Path) -> None:
    target = ws / "data.txt"
    target.write_bytes(b"the original content\n")
    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, b"x" * 100_000, root=ws, write=half_then_disk_full)
    assert target.read_bytes() == b"the original content\n"
    assert names(ws) == ["data.txt"]


def test_a_new_file_failing_midway_is_not_created(ws: Path) -> None:
    with pytest.raises(OSError, match="No space left"):
        atomic_write(ws / "new.txt", b"content", root=ws, write=half_then_disk_full)
    assert list(ws.iterdir()) == []


def test_the_mode_is_kept_and_a_new_file_gets_the_umask_default(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o755)
    secret = ws / "secret.env"
    secret.write_text("A=1\n")
    secret.chmod(0o600)
    atomic_write(script, b"#!/bin/sh\necho new\n", root=ws)
    atomic_write(secret, b"A=2\n", root=ws)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert script.read_text() == "#!/bin/sh\necho new\n"
    umask = os.umask(0)
    os.umask(umask)
    atomic_write(ws / "fresh.txt", b"x", root=ws)
    assert stat.S_IMODE((ws / "fresh.txt").stat().st_mode) == 0o666 & ~umask


def test_a_symlink_in_the_files_place_is_refused_not_followed(ws: Path, tmp_path: Path) -> None:
    # Callers resolve a link before checking it; one found at write time was put there since.
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    link = ws / "config.toml"
    link.symlink_to(outside)
    with pytest.raises(OSError, match="symlink") as raised:
        atomic_write(link, b"new\n", root=ws)
    assert raised.value.errno == errno.ELOOP
    assert outside.read_text() == "outside\n"
    assert link.is_symlink()
    assert names(ws) == ["config.toml"]


def test_a_folder_on_the_path_that_is_a_symlink_is_refused(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "sub").symlink_to(outside)
    for make_folders in (False, True):
        with pytest.raises(OSError, match="symlink") as raised:
            atomic_write(ws / "sub" / "new.txt", b"x", root=ws, make_folders=make_folders)
        assert raised.value.errno == errno.ELOOP
    assert list(outside.iterdir()) == []


def test_a_path_outside_the_root_is_refused(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="not inside") as raised:
        atomic_write(tmp_path / "elsewhere.txt", b"x", root=ws)
    assert raised.value.errno == errno.EXDEV
    assert not (tmp_path / "elsewhere.txt").exists()


def test_missing_folders_are_made_only_when_asked(ws: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write(ws / "a" / "b" / "c.txt", b"x", root=ws)
    atomic_write(ws / "a" / "b" / "c.txt", b"x", root=ws, make_folders=True)
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_a_read_only_file_is_refused_untouched(ws: Path) -> None:
    target = ws / "locked.txt"
    target.write_text("keep\n")
    target.chmod(0o444)
    with pytest.raises(PermissionError):
        atomic_write(target, b"changed\n", root=ws)
    assert target.read_text() == "keep\n"
    assert names(ws) == ["locked.txt"]


# --- the tools and undo -----------------------------------------------------------------------


async def test_edits_replace_the_file_whole_so_a_reader_never_sees_it_cut(ws: Path) -> None:
    # A reader that opened the file before the write keeps the complete old content: the
    # file was replaced, not truncated and rewritten under it.
    target = ws / "app.py"
    target.write_text("value = 1\n" * 1000)
    ctx = ToolContext(ws)
    with reader_of(target) as reader:
        await edit(ctx, "app.py", "value = 1\n" * 1000, "value = 2\n")
        assert reader.read() == b"value = 1\n" * 1000
    with reader_of(target) as reader:
        result = await call(ctx, "write_file", path="app.py", content="value = 3\n")
        assert result.status == "completed", result.output
        assert reader.read() == b"value = 2\n"
    assert target.read_text() == "value = 3\n"
    assert names(ws) == ["app.py"]


async def test_edit_file_and_write_file_keep_the_mode_and_the_link(ws: Path) -> None:
    script = ws / "bin" / "deploy"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho one\n")
    script.chmod(0o755)
    (ws / "deploy").symlink_to("bin/deploy")
    ctx = ToolContext(ws)
    await edit(ctx, "deploy", "echo one", "echo two")
    result = await call(ctx, "write_file", path="deploy", content="#!/bin/sh\necho three\n")
    assert result.status == "completed", result.output
    assert (ws / "deploy").is_symlink()
    assert script.read_text() == "#!/bin/sh\necho three\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


async def test_undo_restores_in_one_step_keeping_the_mode(ws: Path, store: Store) -> None:
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho before\n")
    script.chmod(0o755)
    turn = TurnChanges(store, ws, "s1", "t1")
    ctx = ToolContext(ws, versions=ReadVersions(), changes=turn)
    await edit(ctx, "run.sh", "echo before", "echo after")
    with reader_of(script) as reader, trio.fail_after(10):
        result = await undo_turn(store, ws, "s1", "t1")
        assert reader.read() == b"#!/bin/sh\necho after\n"
    assert result.restored == ["run.sh"]
    assert script.read_text() == "#!/bin/sh\necho before\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert names(ws) == ["run.sh"]


async def test_undo_treats_a_path_that_now_loops_as_a_conflict(ws: Path, store: Store) -> None:
    turn = TurnChanges(store, ws, "s1", "t1")
    ctx = ToolContext(ws, versions=ReadVersions(), changes=turn)
    result = await call(ctx, "write_file", path="gen/out.txt", content="made\n")
    assert result.status == "completed", result.output
    (ws / "gen" / "out.txt").unlink()
    (ws / "gen").rmdir()
    (ws / "gen").symlink_to("loop")
    (ws / "loop").symlink_to("gen")
    with trio.fail_after(10):
        undone = await undo_turn(store, ws, "s1", "t1", force=True)
    assert undone.conflicts == ["gen/out.txt"]
    assert undone.removed == []
    assert names(ws) == ["gen", "loop"]


async def test_a_write_that_fails_says_so_and_changes_nothing(ws: Path) -> None:
    (ws / "notes.txt").write_text("a file, not a folder\n")
    result = await call(ToolContext(ws), "write_file", path="notes.txt/inner.txt", content="x")
    assert result.status == "failed"
    assert result.output.startswith("Could not write notes.txt/inner.txt: ")
    assert result.output.endswith("The file was not created.")
    assert names(ws) == ["notes.txt"]
    assert (ws / "notes.txt").read_text() == "a file, not a folder\n"


async def test_the_workspace_root_is_a_folder_to_every_file_tool(ws: Path) -> None:
    ctx = ToolContext(ws)
    read = await call(ctx, "read_file", path=".")
    assert read.output == ". is a directory; use list_dir for directories."
    written = await call(ctx, "write_file", path=".", content="x")
    assert written.output == ". is a directory."
    edited = await call(ctx, "edit_file", path=".", old_string="a", new_string="b")
    assert edited.output == ". is a directory."
    assert names(ws) == []
