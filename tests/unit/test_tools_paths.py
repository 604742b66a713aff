"""Every path-taking tool refuses paths that leave the workspace: `..`, an absolute path
elsewhere, a symlink pointing out, a NUL byte — and touches nothing outside."""

import json
from pathlib import Path

import pytest
import trio

from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry

REGISTRY = ToolRegistry(default_tools())

# (tool, the argument that carries the path, other arguments)
PATH_TOOLS: list[tuple[str, str, dict[str, object]]] = [
    ("read_file", "path", {}),
    ("list_dir", "path", {}),
    ("glob", "path", {"pattern": "**/*"}),
    ("grep", "path", {"pattern": "secret"}),
    ("edit_file", "path", {"old_string": "secret", "new_string": "changed"}),
    ("write_file", "path", {"content": "changed"}),
    ("run_command", "cwd", {"command": "cat secret.txt > stolen.txt", "description": "x"}),
]


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (ws / "out_link").symlink_to(outside)
    (ws / "file_link.txt").symlink_to(outside / "secret.txt")
    return ws, outside


def escapes(outside: Path, arg: str) -> list[str]:
    target = "secret.txt" if arg == "path" else ""
    joined = f"/{target}" if target else ""
    return [
        f"../outside{joined}",
        f"{outside}{joined}",
        f"out_link{joined}",
        *(["file_link.txt"] if target else []),
        f"ok\x00{joined}",
    ]


@pytest.mark.parametrize(("tool", "arg", "extra"), PATH_TOOLS, ids=[t[0] for t in PATH_TOOLS])
async def test_paths_outside_the_workspace_are_refused(
    layout: tuple[Path, Path], tool: str, arg: str, extra: dict[str, object]
) -> None:
    ws, outside = layout
    ctx = ToolContext(ws)
    for bad in escapes(outside, arg):
        params = REGISTRY.validate(tool, json.dumps({arg: bad, **extra}))
        assert not isinstance(params, str), params
        with trio.fail_after(10):
            result = await REGISTRY.run(tool, params, ctx)
        assert result.status == "failed", (bad, result.output)
        if "\x00" in bad:
            assert "NUL" in result.output
        else:
            assert "outside the workspace" in result.output, (bad, result.output)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"


async def test_symlinks_inside_the_workspace_are_followed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "a.txt").write_text("inside\n")
    (ws / "alias").symlink_to(ws / "real")
    params = REGISTRY.validate("read_file", json.dumps({"path": "alias/a.txt"}))
    assert not isinstance(params, str)
    with trio.fail_after(10):
        result = await REGISTRY.run("read_file", params, ToolContext(ws))
    assert result.output == "1\tinside"


@pytest.mark.parametrize(("tool", "arg", "extra"), PATH_TOOLS, ids=[t[0] for t in PATH_TOOLS])
async def test_a_symlink_loop_is_a_failed_call_that_names_it(
    tmp_path: Path, tool: str, arg: str, extra: dict[str, object]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    ctx = ToolContext(ws)
    for looped in ("a", "a/inner"):
        params = REGISTRY.validate(tool, json.dumps({arg: looped, **extra}))
        assert not isinstance(params, str), params
        with trio.fail_after(10):
            result = await REGISTRY.run(tool, params, ctx)
        assert result.status == "failed", (looped, result.output)
        assert "symlink loop at a" in result.output, (looped, result.output)
    assert sorted(p.name for p in ws.iterdir()) == ["a", "b"]


async def test_a_symlink_loop_inside_a_folder_does_not_stop_its_listing_or_search(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("needle = 1\n")
    (ws / "src" / "a").symlink_to("b")
    (ws / "src" / "b").symlink_to("a")
    (ws / "src" / "here").symlink_to(".")
    ctx = ToolContext(ws)
    outputs: dict[str, str] = {}
    for tool, args in [
        ("list_dir", {"path": "src"}),
        ("grep", {"pattern": "needle"}),
        ("glob", {"pattern": "**/*.py"}),
        ("run_command", {"command": "ls", "description": "x", "cwd": "src"}),
    ]:
        params = REGISTRY.validate(tool, json.dumps(args))
        assert not isinstance(params, str), params
        with trio.fail_after(10):
            result = await REGISTRY.run(tool, params, ctx)
        assert result.status == "completed", (tool, result.output)
        outputs[tool] = result.output
    assert outputs["list_dir"].splitlines() == ["a", "app.py", "b", "here/"]
    assert "src/app.py" in outputs["grep"]
    assert "src/app.py" in outputs["glob"]
    assert "app.py" in outputs["run_command"]
