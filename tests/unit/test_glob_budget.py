"""The glob tool cannot hold the daemon: a pathological pattern finishes, the walk stops at its
time limit with what it found, a bad pattern is a clear error, and a cancelled call returns at
once while its worker thread is told to stop."""

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tether.daemon.tools import glob as glob_module
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.filetree import WalkedFile
from tether.daemon.tools.glob import Glob
from tether.daemon.tools.grep import Grep
from tether.daemon.tools.registry import ToolRegistry, ToolResult


async def call(registry: ToolRegistry, ws: Path, tool: str, **args: object) -> ToolResult:
    params = registry.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(30):
        return await registry.run(tool, params, ToolContext(ws))


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A workspace with a file 25 folders down and a file with a 60-character name."""
    folder = tmp_path.joinpath(*(f"d{i}" for i in range(25)))
    folder.mkdir(parents=True)
    (folder / "file.txt").write_text("x\n")
    (tmp_path / ("a" * 60)).write_text("needle\n")
    (tmp_path / "kept.py").write_text("needle\n")
    return tmp_path


async def test_pathological_patterns_finish(deep: Path) -> None:
    registry = ToolRegistry([Glob()])
    result = await call(registry, deep, "glob", pattern="**/" * 10 + "*.txt")
    assert result.status == "completed"
    assert result.output.endswith("d24/file.txt")
    result = await call(registry, deep, "glob", pattern="*a*a*a*a*a*a*a*ab")
    assert result.output == "No files match '*a*a*a*a*a*a*a*ab' in the workspace."


async def test_pathological_ignore_patterns_finish_in_the_fallback_search(deep: Path) -> None:
    (deep / ".gitignore").write_text("*a*a*a*a*a*a*a*ab\n" + "**/" * 10 + "*.log\n")
    registry = ToolRegistry([Grep(rg_path=None)])
    result = await call(registry, deep, "grep", pattern="needle")
    assert result.output.split("\n") == ["a" * 60, "kept.py"]
    glob = await call(registry, deep, "grep", pattern="needle", glob="*a*a*a*a*a*a*a*ab")
    assert glob.output.startswith("No matches")


async def test_a_bad_pattern_is_a_clear_error(tmp_path: Path) -> None:
    result = await call(ToolRegistry([Glob()]), tmp_path, "glob", pattern="{a,b}" * 9)
    assert result.status == "failed"
    assert "more than 256 alternatives" in result.output
    fallback = ToolRegistry([Grep(rg_path=None)])
    result = await call(fallback, tmp_path, "grep", pattern="x", glob="[z-a]")
    assert result.status == "failed"
    assert "not a valid glob" in result.output


async def test_the_walk_stops_at_its_time_limit_with_a_note(deep: Path) -> None:
    result = await call(ToolRegistry([Glob(time_limit=0)]), deep, "glob", pattern="**/*")
    assert result.status == "completed"
    assert "The walk stopped after 0 s" in result.output


async def test_a_cancelled_glob_returns_at_once_and_its_walk_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A walk that blocks after its first entry, as a walk of a huge or slow tree would.
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text("")
    reached, release, closed = threading.Event(), threading.Event(), threading.Event()
    yielded: list[str] = []
    real_walk = glob_module.walk_files

    def slow_walk(*args: object, **kwargs: object) -> Iterator[tuple[str, WalkedFile, bool]]:
        try:
            for item in real_walk(*args, **kwargs):  # type: ignore[arg-type]
                yielded.append(item[0])
                yield item
                reached.set()
                release.wait(timeout=30)
        finally:
            closed.set()

    monkeypatch.setattr(glob_module, "walk_files", slow_walk)
    registry = ToolRegistry([Glob()])
    params = registry.validate("glob", json.dumps({"pattern": "**/*.py"}))
    assert not isinstance(params, str)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(registry.run, "glob", params, ToolContext(tmp_path))
            await trio.to_thread.run_sync(reached.wait)
            nursery.cancel_scope.cancel()
        # The call is gone while its thread still waits; released, the walk sees the stop
        # flag at the next entry and ends, never reading the third.
        assert not closed.is_set()
        release.set()
        assert await trio.to_thread.run_sync(closed.wait, 10)
    assert len(yielded) == 2
