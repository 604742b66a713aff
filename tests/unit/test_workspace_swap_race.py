"""A command racing the daemon's file tools: a folder inside the workspace is swapped for a
symlink to a folder outside it, over and over, while the tools read and write through that
folder and undo puts files back. The daemon is not sandboxed, so whatever it does outside
the workspace it must not do: nothing is created or changed outside, nothing outside is read.

The swap is `renameat2(RENAME_EXCHANGE)`, which trades the folder and the symlink in one step,
as a hostile command would: the path always exists, as one or the other."""

import ctypes
import ctypes.util
import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest
import trio

from tether.daemon.sessions.store import Store
from tether.daemon.sessions.undo import TurnChanges, undo_turn
from tether.daemon.tools.base import ReadVersions, ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry, ToolResult

REGISTRY = ToolRegistry(default_tools())
TRIES = 300
OUTSIDE_SECRET = "outside-secret-5d1e"
FOLDER_HELD = 0.0002  # seconds between two swaps

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Trade the names `a` and `b` atomically."""
    if _libc.renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class Swapper:
    """A thread that keeps trading `folder` for a symlink to `outside` until stopped."""

    def __init__(self, folder: Path, outside: Path) -> None:
        self.folder = folder
        self.link = folder.with_name(folder.name + "-link")
        self.link.symlink_to(outside)
        self.swaps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # The symlink stays for a moment only, the folder longer: most calls then pass the
        # containment check and meet the symlink later on, where a check-then-use gap is.
        while not self._stop.wait(FOLDER_HELD):
            exchange(self.folder, self.link)
            time.sleep(0)
            exchange(self.folder, self.link)
            self.swaps += 1

    def __enter__(self) -> "Swapper":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.folder.is_symlink():  # leave the folder in its place
            exchange(self.folder, self.link)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """(the workspace, with a folder `sub`; a folder outside it)."""
    ws = (tmp_path / "ws").resolve()
    (ws / "sub").mkdir(parents=True)
    outside = (tmp_path / "outside").resolve()
    outside.mkdir()
    return ws, outside


def probe_swap_support(tmp_path: Path) -> None:
    a, b = tmp_path / "probe-a", tmp_path / "probe-b"
    a.mkdir()
    b.symlink_to(a)
    try:
        exchange(a, b)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
        raise


async def call(ctx: ToolContext, tool: str, **args: object) -> ToolResult:
    params = REGISTRY.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(10):
        return await REGISTRY.run(tool, params, ctx)


async def test_writes_never_land_outside(places: tuple[Path, Path], tmp_path: Path) -> None:
    probe_swap_support(tmp_path)
    ws, outside = places
    ctx = ToolContext(ws)
    completed = 0
    with Swapper(ws / "sub", outside) as swapper:
        # Writes go on until the swapper has swapped as often as there are tries: a loaded
        # machine can starve its thread, and a race that barely ran would prove nothing.
        i = 0
        while i < TRIES or (swapper.swaps < TRIES and i < 20 * TRIES):
            result = await call(ctx, "write_file", path=f"sub/new-{i}.txt", content="x\n")
            completed += result.status == "completed"
            i += 1
    assert swapper.swaps >= TRIES, f"only {swapper.swaps} swaps during {i} writes"
    assert sorted(outside.iterdir()) == []
    assert completed > 0, "the race left no write to check"
    written = {p.name for p in (ws / "sub").iterdir()}
    assert len(written) == completed


async def test_reads_never_see_outside(places: tuple[Path, Path], tmp_path: Path) -> None:
    probe_swap_support(tmp_path)
    ws, outside = places
    (ws / "sub" / "notes.txt").write_text("inside\n")
    (outside / "notes.txt").write_text(f"{OUTSIDE_SECRET}\n")
    ctx = ToolContext(ws)
    seen_inside = 0
    with Swapper(ws / "sub", outside):
        for _ in range(TRIES):
            result = await call(ctx, "read_file", path="sub/notes.txt")
            assert OUTSIDE_SECRET not in result.output
            seen_inside += "inside" in result.output
            edited = await call(
                ctx, "edit_file", path="sub/notes.txt", old_string="in", new_string="in"
            )
            assert OUTSIDE_SECRET not in edited.output
    assert (outside / "notes.txt").read_text() == f"{OUTSIDE_SECRET}\n"
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]
    assert seen_inside > 0, "the race left no read to check"


async def test_undo_never_writes_outside(places: tuple[Path, Path], tmp_path: Path) -> None:
    probe_swap_support(tmp_path)
    ws, outside = places
    store = Store(tmp_path / "state" / "tether.db")
    store.open()
    try:
        turn = TurnChanges(store, ws, "s1", "t1")
        ctx = ToolContext(ws, versions=ReadVersions(), changes=turn)
        for i in range(TRIES):
            (ws / "sub" / f"u{i}.txt").write_text("before\n")
            assert (await call(ctx, "read_file", path=f"sub/u{i}.txt")).status == "completed"
            written = await call(ctx, "write_file", path=f"sub/u{i}.txt", content="after\n")
            assert written.status == "completed", written.output
        with Swapper(ws / "sub", outside):
            with trio.fail_after(60):
                undone = await undo_turn(store, ws, "s1", "t1", force=True)
        assert sorted(outside.iterdir()) == []
        assert undone.restored, "the race left no restore to check"
        for rel in undone.restored:
            assert (ws / rel).read_text() == "before\n"
    finally:
        store.close()
