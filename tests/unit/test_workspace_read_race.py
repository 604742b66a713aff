"""A command racing the daemon's other readers of the workspace: the mentions and images a
client sends with a turn, the repository's instruction files, list_dir, glob, the grep
fallback (the search used without ripgrep), a repository's skills and the files synced to
language servers. A folder inside the workspace is swapped for a symlink to a folder outside
it, over and over (`Swapper`, `renameat2(RENAME_EXCHANGE)`), while the reader runs; the
outside folder holds a marker in a file's content and in a file's name. Whatever the reader
returns must never hold the marker: the daemon is not sandboxed, and what it read outside the
workspace would reach the model.

The static case, a folder symlink inside the workspace that points out, is checked too: no
reader follows it. And a walk, which holds a descriptor per level, leaks none and stops at
its level limit."""

import io
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from tests.unit.test_workspace_swap_race import Swapper, probe_swap_support
from tether.daemon.context.instructions import load_project_instructions
from tether.daemon.context.mentions import render_context
from tether.daemon.lsp.diagnostics import read_files
from tether.daemon.sessions.input import _read_images  # pyright: ignore[reportPrivateUsage]
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.skills.trust import SkillsTrust
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.filetree import MAX_WALK_LEVELS, walk_files
from tether.daemon.tools.glob import Glob
from tether.daemon.tools.grep import Grep, GrepParams
from tether.daemon.tools.list_dir import ListDir
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.search.ripgrep import confined, find_rg, rg_command
from tether.daemon.tools.skill import SkillTool

TRIES = 300
MARKER = "outside-marker-7c2a"


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """(the workspace, with `sub/notes.txt`; a folder outside it holding the marker in
    `notes.txt` and in a file's name). Skips where the swap cannot be made."""
    probe_swap_support(tmp_path)
    ws = (tmp_path / "ws").resolve()
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "notes.txt").write_text("inside: hello\n")
    outside = (tmp_path / "outside").resolve()
    outside.mkdir()
    (outside / "notes.txt").write_text(f"{MARKER}: hello\n")
    (outside / f"{MARKER}.txt").write_text(f"{MARKER}: hello\n")
    return ws, outside


async def run(registry: ToolRegistry, ctx: ToolContext, tool: str, **args: object) -> ToolResult:
    params = registry.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    return await registry.run(tool, params, ctx)


def test_mentions_never_attach_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    inside = 0
    with Swapper(ws / "sub", outside) as swapper:
        for _ in range(TRIES):
            block, problems = render_context(ws, mentions=["sub/notes.txt", "sub"])
            assert MARKER not in block
            assert not any(MARKER in problem for problem in problems)
            inside += "inside: hello" in block
    assert swapper.swaps > 0
    assert inside > 0, "the race left no mention to check"


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_mentions_never_send_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    (ws / "sub" / "pic.png").write_bytes(_png(2, 2))
    (outside / "pic.png").write_bytes(_png(7, 3))
    inside = 0
    with Swapper(ws / "sub", outside) as swapper:
        for _ in range(TRIES):
            prepared, _others, _problems = _read_images(ws, [], ["sub/pic.png"], "anthropic")
            assert all(image.ref.width != 7 for image in prepared)
            inside += len(prepared)
    assert swapper.swaps > 0
    assert inside > 0, "the race left no image to check"


async def test_list_dir_never_lists_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    registry, ctx = ToolRegistry([ListDir()]), ToolContext(ws)
    inside = 0
    with Swapper(ws / "sub", outside) as swapper:
        for _ in range(TRIES):
            result = await run(registry, ctx, "list_dir", path="sub")
            assert MARKER not in result.output
            inside += result.output == "notes.txt"
    assert swapper.swaps > 0
    assert inside > 0, "the race left no listing to check"


async def test_glob_never_walks_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    (ws / "sub" / "deeper").mkdir()
    (ws / "sub" / "deeper" / "more.txt").write_text("inside\n")
    registry, ctx = ToolRegistry([Glob()]), ToolContext(ws)
    inside = 0
    # The folder swapped is one the walk enters, below the folder it starts from.
    with Swapper(ws / "sub" / "deeper", outside) as swapper:
        for _ in range(TRIES):
            for pattern in ("**/*.txt", "sub/deeper/*"):
                result = await run(registry, ctx, "glob", pattern=pattern)
                assert MARKER not in result.output
                inside += "sub/deeper/more.txt" in result.output
    assert swapper.swaps > 0
    assert inside > 0, "the race left no walk to check"


async def test_grep_fallback_never_searches_outside(places: tuple[Path, Path]) -> None:
    await _grep_never_searches_outside(Grep(rg_path=None), *places, TRIES)


async def _grep_never_searches_outside(grep: Grep, ws: Path, outside: Path, tries: int) -> None:
    registry, ctx = ToolRegistry([grep]), ToolContext(ws)
    inside = 0
    with Swapper(ws / "sub", outside) as swapper:
        for _ in range(tries):
            for path in (".", "sub", "sub/notes.txt"):
                result = await run(
                    registry, ctx, "grep", pattern="hello", path=path, output_mode="content"
                )
                assert MARKER not in result.output
                inside += "inside: hello" in result.output
    assert swapper.swaps > 0
    assert inside > 0, "the race left no search to check"


def _skill(folder: Path, body: str) -> None:
    (folder / "docs").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: demo\ndescription: A demo.\n---\n{body}\n")
    (folder / "docs" / "guide.md").write_text(f"{body} guide\n")


async def test_skills_never_read_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    _skill(ws / ".tether" / "skills" / "demo", "inside")
    _skill(outside / "skills" / "demo", MARKER)
    (outside / "skills" / "demo" / f"{MARKER}.md").write_text("x\n")
    library = SkillLibrary(ws, None, SkillsTrust(None))
    library.trust_workspace()
    registry, ctx = ToolRegistry([SkillTool(library)]), ToolContext(ws)
    inside = 0
    with Swapper(ws / ".tether", outside) as swapper:
        for _ in range(TRIES):
            found = library.refresh()
            assert all(MARKER not in skill.body for skill in found.skills)
            if found.get("demo") is None:
                continue
            for args in ({}, {"resource": "docs/guide.md"}):
                result = await run(registry, ctx, "skill", name="demo", **args)
                assert MARKER not in result.output
                inside += "inside" in result.output
    assert swapper.swaps > 0
    assert inside > 0, "the race left no skill to check"


async def test_a_folder_symlink_pointing_out_is_not_followed(places: tuple[Path, Path]) -> None:
    ws, outside = places
    (ws / "linked").symlink_to(outside, target_is_directory=True)
    (ws / ".tether" / "skills").mkdir(parents=True)
    (ws / ".tether" / "skills" / "demo").symlink_to(outside / "skills" / "demo")
    _skill(outside / "skills" / "demo", MARKER)
    block, _ = render_context(ws, mentions=["linked/notes.txt", "linked"])
    assert MARKER not in block
    assert "outside the workspace" in block
    registry = ToolRegistry([ListDir(), Glob(), Grep(rg_path=None)])
    ctx = ToolContext(ws)
    for tool, args in (
        ("list_dir", {"path": "linked"}),
        ("glob", {"pattern": "**/*"}),
        ("grep", {"pattern": "hello", "output_mode": "content"}),
    ):
        result = await run(registry, ctx, tool, **args)
        assert MARKER not in result.output, tool
    library = SkillLibrary(ws, None, SkillsTrust(None))
    found = library.refresh()
    assert found.get("demo") is None
    assert [p.reason for p in found.invalid] == ["it leads out of the workspace through a symlink"]


def test_project_instructions_never_come_from_outside(places: tuple[Path, Path]) -> None:
    ws, outside = places
    (ws / ".tether").mkdir()
    (ws / ".tether" / "instructions.md").write_text("inside rules\n")
    (outside / "instructions.md").write_text(f"{MARKER} rules\n")
    inside = 0
    with Swapper(ws / ".tether", outside) as swapper:
        for _ in range(TRIES):
            text = load_project_instructions(ws)
            assert MARKER not in text
            inside += "inside rules" in text
    assert swapper.swaps > 0
    assert inside > 0, "the race left no instructions to check"


def test_files_sent_to_language_servers_never_come_from_outside(
    places: tuple[Path, Path],
) -> None:
    ws, outside = places
    path = ws / "sub" / "notes.txt"
    inside = 0
    with Swapper(ws / "sub", outside) as swapper:
        for _ in range(TRIES):
            texts, _gone = read_files(ws, [path], [path])
            assert all(MARKER not in text for text in texts.values())
            inside += path in texts
    assert swapper.swaps > 0
    assert inside > 0, "the race left no read to check"


def test_a_walk_closes_its_descriptors_and_stops_at_the_level_limit(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    deep = root.joinpath(*["d"] * (MAX_WALK_LEVELS + 5))
    deep.mkdir(parents=True)
    for level in (MAX_WALK_LEVELS - 1, MAX_WALK_LEVELS):
        root.joinpath(*["d"] * level, "f.txt").write_text("x\n")
    (root / "top.txt").write_text("x\n")
    before = len(os.listdir("/proc/self/fd"))
    walk = walk_files(root, root)
    found = [rel for rel, _, _ in walk]
    assert found == ["top.txt", "/".join(["d"] * (MAX_WALK_LEVELS - 1) + ["f.txt"])]
    assert len(os.listdir("/proc/self/fd")) == before
    half = walk_files(root, root)
    next(half)
    half.close()
    assert len(os.listdir("/proc/self/fd")) == before


async def test_ripgrep_never_searches_outside(places: tuple[Path, Path]) -> None:
    rg = find_rg()
    if rg is None or confined([rg], places[0]) == [rg]:
        pytest.skip("ripgrep, or bubblewrap to confine it, is not available here")
    # Each ripgrep run is a process (in a namespace): fewer tries, still many swaps.
    await _grep_never_searches_outside(Grep(rg_path=rg), *places, TRIES // 3)


def test_ripgrep_is_told_not_to_follow_symlinks() -> None:
    command = rg_command("rg", GrepParams(pattern="x"), "content", ["sub"], pcre2=False)
    assert "--no-config" in command  # no config file can add --follow
    assert not {"-L", "--follow"} & set(command)
