"""read_file, edit_file, write_file and the edit guard, on real files in a temporary workspace,
called through the registry as the turn loop calls them (JSON arguments, validation, cap)."""

import json
import os
from pathlib import Path

import pytest
import trio

from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.edit_file import EditFile, EditFileParams
from tether.daemon.tools.registry import ToolRegistry, ToolResult
from tether.daemon.tools.write_file import WriteFile, WriteFileParams
from tether.protocol.items import FileChange

REGISTRY = ToolRegistry(default_tools())


async def call(ctx: ToolContext, tool: str, **args: object) -> ToolResult:
    params = REGISTRY.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(10):
        return await REGISTRY.run(tool, params, ctx)


async def ok(ctx: ToolContext, tool: str, **args: object) -> str:
    result = await call(ctx, tool, **args)
    assert result.status == "completed", result.output
    return result.output


async def fails(ctx: ToolContext, tool: str, **args: object) -> str:
    result = await call(ctx, tool, **args)
    assert result.status == "failed", result.output
    return result.output


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(ws)


# --- read_file --------------------------------------------------------------------------------


async def test_read_file_numbers_lines_with_a_tab(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.py").write_text("first\n\tsecond\nthird\n")
    assert await ok(ctx, "read_file", path="a.py") == "1\tfirst\n2\t\tsecond\n3\tthird"


async def test_read_file_shows_1000_lines_by_default_with_a_footer(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 1501)))
    out = await ok(ctx, "read_file", path="long.txt")
    lines = out.split("\n")
    assert lines[0] == "1\tline 1"
    assert lines[999] == "1000\tline 1000"
    assert lines[1000] == "(lines 1-1000 of 1500; continue with offset=1001)"
    assert len(lines) == 1001


async def test_read_file_offset_and_limit(ws: Path, ctx: ToolContext) -> None:
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 51)))
    out = await ok(ctx, "read_file", path="long.txt", offset=10, limit=3)
    assert (
        out == "10\tline 10\n11\tline 11\n12\tline 12\n(lines 10-12 of 50; continue with offset=13)"
    )
    tail = await ok(ctx, "read_file", path="long.txt", offset=49, limit=10)
    assert tail == "49\tline 49\n50\tline 50\n(lines 49-50 of 50)"
    past = await ok(ctx, "read_file", path="long.txt", offset=80)
    assert "offset 80 is past the end" in past


async def test_read_file_cuts_long_lines_with_a_marker(ws: Path, ctx: ToolContext) -> None:
    (ws / "min.js").write_text("x" * 4000 + "\nshort\n")
    out = await ok(ctx, "read_file", path="min.js")
    first, second = out.split("\n")
    assert first == "1\t" + "x" * 1500 + "… [line cut at 1500 characters]"
    assert second == "2\tshort"


async def test_read_file_refuses_binary_files(ws: Path, ctx: ToolContext) -> None:
    (ws / "blob.bin").write_bytes(b"PK\x03\x04\x00\x00binary")
    assert "binary" in await fails(ctx, "read_file", path="blob.bin")


async def test_read_file_refuses_files_over_10_mb(ws: Path, ctx: ToolContext) -> None:
    (ws / "big.log").write_bytes(b"")
    os.truncate(ws / "big.log", 10 * 1024 * 1024 + 1)  # sparse: no 10 MB write
    out = await fails(ctx, "read_file", path="big.log")
    assert "over 10 MB" in out
    assert "10,485,761 bytes" in out


async def test_read_file_not_found_suggests_glob(ws: Path, ctx: ToolContext) -> None:
    out = await fails(ctx, "read_file", path="src/missing.py")
    assert "does not exist" in out
    assert "glob" in out
    assert "**/missing.py" in out


async def test_read_file_refuses_a_folder(ws: Path, ctx: ToolContext) -> None:
    (ws / "src").mkdir()
    assert "list_dir" in await fails(ctx, "read_file", path="src")


async def test_read_file_records_the_version_for_the_guard(ws: Path, ctx: ToolContext) -> None:
    target = ws / "a.txt"
    target.write_text("hello\n")
    assert ctx.versions.get(target.resolve()) is None
    await ok(ctx, "read_file", path="a.txt", limit=1)
    version = ctx.versions.get(target.resolve())
    assert version is not None
    assert version.size == 6
    assert version.mtime_ns == target.stat().st_mtime_ns


# --- edit_file --------------------------------------------------------------------------------


async def read(ctx: ToolContext, path: str) -> None:
    await ok(ctx, "read_file", path=path)


async def test_edit_file_replaces_a_unique_string(ws: Path, ctx: ToolContext) -> None:
    (ws / "app.py").write_text("def greet(name):\n    return 'hi ' + name\n")
    await read(ctx, "app.py")
    out = await ok(
        ctx,
        "edit_file",
        path="app.py",
        old_string="    return 'hi ' + name\n",
        new_string="    message = 'hello ' + name\n    return message\n",
    )
    assert (ws / "app.py").read_text() == (
        "def greet(name):\n    message = 'hello ' + name\n    return message\n"
    )
    assert out == "Edited app.py: replaced 1 occurrence at line 2 (+2 -1 lines)."


async def test_edit_file_refuses_an_ambiguous_string_unless_replace_all(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n")
    await read(ctx, "a.txt")
    out = await fails(ctx, "edit_file", path="a.txt", old_string="x = 1", new_string="x = 9")
    assert "occurs 3 times" in out
    assert "lines 1, 3, 5" in out
    assert "replace_all" in out
    assert (ws / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n"
    out = await ok(
        ctx, "edit_file", path="a.txt", old_string="x = 1", new_string="x = 9", replace_all=True
    )
    assert (ws / "a.txt").read_text() == "x = 9\ny = 2\nx = 9\nz = 3\nx = 9\n"
    assert "replaced 3 occurrences at lines 1, 3, 5" in out


async def test_edit_file_matches_lf_text_in_a_crlf_file_and_keeps_crlf(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await read(ctx, "win.txt")
    await ok(ctx, "edit_file", path="win.txt", old_string="one\ntwo\n", new_string="1\n2\n")
    assert (ws / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_file_matches_crlf_text_in_an_lf_file(ws: Path, ctx: ToolContext) -> None:
    (ws / "unix.txt").write_bytes(b"one\ntwo\nthree\n")
    await read(ctx, "unix.txt")
    await ok(ctx, "edit_file", path="unix.txt", old_string="two\r\nthree", new_string="2\r\n3")
    assert (ws / "unix.txt").read_bytes() == b"one\n2\n3\n"


async def test_edit_file_miss_names_near_matching_lines(ws: Path, ctx: ToolContext) -> None:
    source = "class A:\n    def run(self):\n        return 1\n\n\ndef run(self):\n    pass\n"
    (ws / "a.py").write_text(source)
    await read(ctx, "a.py")
    out = await fails(
        ctx,
        "edit_file",
        path="a.py",
        old_string="  def  run(self):\n    return 1\n",
        new_string="x",
    )
    assert "not found" in out
    assert "lines 2, 6" in out
    assert (ws / "a.py").read_text() == source


async def test_edit_file_miss_without_anything_close(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.py").write_text("alpha\nbeta\n")
    await read(ctx, "a.py")
    out = await fails(ctx, "edit_file", path="a.py", old_string="zzz qqq", new_string="x")
    assert "not found" in out
    assert "not even approximately" in out


async def test_edit_file_refusals(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("same\n")
    await read(ctx, "a.txt")
    identical = await fails(ctx, "edit_file", path="a.txt", old_string="same", new_string="same")
    assert "identical" in identical
    empty = await fails(ctx, "edit_file", path="a.txt", old_string="", new_string="new")
    assert "old_string is empty" in empty
    assert "write_file" in empty
    missing = await fails(ctx, "edit_file", path="nope.txt", old_string="a", new_string="b")
    assert "does not exist" in missing
    assert "write_file" in missing


async def test_edit_guard_refuses_a_file_not_read(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("content\n")
    out = await fails(ctx, "edit_file", path="a.txt", old_string="content", new_string="new")
    assert "has not been read" in out
    assert "read_file" in out
    assert (ws / "a.txt").read_text() == "content\n"


async def test_edit_guard_refuses_a_file_changed_on_disk(ws: Path, ctx: ToolContext) -> None:
    target = ws / "a.txt"
    target.write_text("version 1\n")
    await read(ctx, "a.txt")
    target.write_text("version 2 by the user\n")
    out = await fails(ctx, "edit_file", path="a.txt", old_string="version", new_string="v")
    assert "changed on disk since you last read it" in out
    assert target.read_text() == "version 2 by the user\n"
    await read(ctx, "a.txt")
    await ok(ctx, "edit_file", path="a.txt", old_string="version 2", new_string="v3")
    assert target.read_text() == "v3 by the user\n"


async def test_edit_guard_sees_changes_by_a_command(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("before\n")
    await read(ctx, "a.txt")
    await ok(ctx, "run_command", command="echo appended >> a.txt", description="append")
    out = await fails(ctx, "edit_file", path="a.txt", old_string="before", new_string="after")
    assert "changed on disk" in out


async def test_consecutive_edits_need_no_reread(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("a\nb\nc\n")
    await read(ctx, "a.txt")
    await ok(ctx, "edit_file", path="a.txt", old_string="a\n", new_string="A\n")
    await ok(ctx, "edit_file", path="a.txt", old_string="b\n", new_string="B\n")
    await ok(ctx, "write_file", path="a.txt", content="whole\n")
    await ok(ctx, "edit_file", path="a.txt", old_string="whole", new_string="rewritten")
    assert (ws / "a.txt").read_text() == "rewritten\n"


async def test_edit_file_preview_is_a_diff_and_writes_nothing(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    await read(ctx, "a.txt")
    tool = EditFile()
    params = EditFileParams(path="a.txt", old_string="two", new_string="2")
    assert tool.target_path(params) == "a.txt"
    with trio.fail_after(10):
        diff = await tool.preview(params, ctx)
    assert diff.splitlines() == [
        "--- a/a.txt",
        "+++ b/a.txt",
        "@@ -1,2 +1,2 @@",
        " one",
        "-two",
        "+2",
    ]
    assert (ws / "a.txt").read_text() == "one\ntwo\n"


async def test_edit_file_preview_applies_the_guard(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("one\n")
    with trio.fail_after(10), pytest.raises(Exception, match="has not been read"):
        await EditFile().preview(
            EditFileParams(path="a.txt", old_string="one", new_string="1"), ctx
        )


# --- write_file -------------------------------------------------------------------------------


async def test_write_file_creates_parent_folders(ws: Path, ctx: ToolContext) -> None:
    out = await ok(ctx, "write_file", path="new/deep/file.txt", content="a\nb\n")
    assert (ws / "new" / "deep" / "file.txt").read_text() == "a\nb\n"
    assert out == "Created new/deep/file.txt (2 lines)."


async def test_write_file_overwrite_needs_an_up_to_date_read(ws: Path, ctx: ToolContext) -> None:
    target = ws / "a.txt"
    target.write_text("original\n")
    out = await fails(ctx, "write_file", path="a.txt", content="replaced\n")
    assert "has not been read" in out
    await read(ctx, "a.txt")
    target.write_text("changed by someone\n")
    assert "changed on disk" in await fails(ctx, "write_file", path="a.txt", content="x\n")
    assert target.read_text() == "changed by someone\n"
    await read(ctx, "a.txt")
    out = await ok(ctx, "write_file", path="a.txt", content="replaced\n")
    assert target.read_text() == "replaced\n"
    assert out == "Wrote a.txt (1 line; +1 -1 lines)."


async def test_write_file_preview(ws: Path, ctx: ToolContext) -> None:
    tool = WriteFile()
    with trio.fail_after(10):
        diff = await tool.preview(WriteFileParams(path="n.txt", content="hi\n"), ctx)
    assert diff.splitlines() == ["--- /dev/null", "+++ b/n.txt", "@@ -0,0 +1 @@", "+hi"]
    assert not (ws / "n.txt").exists()


async def test_write_file_refuses_a_folder(ws: Path, ctx: ToolContext) -> None:
    (ws / "src").mkdir()
    assert "directory" in await fails(ctx, "write_file", path="src", content="x")


def read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


class RecordingTracker:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bytes | None, bytes | None]] = []

    async def before_write(self, path: Path) -> None:
        content = await trio.to_thread.run_sync(
            lambda: path.read_bytes() if path.exists() else None
        )
        self.calls.append(("before", path.name, content, None))

    def after_write(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        self.calls.append(("after", path.name, before, after))

    def files_changed(self) -> list[FileChange]:
        return []


async def test_writes_go_through_the_change_tracker(ws: Path) -> None:
    tracker = RecordingTracker()
    ctx = ToolContext(ws, changes=tracker)
    await ok(ctx, "write_file", path="n.txt", content="one\n")
    await ok(ctx, "edit_file", path="n.txt", old_string="one", new_string="two")
    assert tracker.calls == [
        ("before", "n.txt", None, None),
        ("after", "n.txt", None, b"one\n"),
        ("before", "n.txt", b"one\n", None),
        ("after", "n.txt", b"one\n", b"two\n"),
    ]


async def test_edit_keeps_invalid_utf8_bytes(ws: Path, ctx: ToolContext) -> None:
    (ws / "latin.txt").write_bytes(b"caf\xe9 = 1\nvalue = 2\n")
    await read(ctx, "latin.txt")
    await ok(ctx, "edit_file", path="latin.txt", old_string="value = 2", new_string="value = 3")
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9 = 1\nvalue = 3\n"


async def test_edit_preserves_file_mode(ws: Path, ctx: ToolContext) -> None:
    script = ws / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o755)
    await read(ctx, "run.sh")
    await ok(ctx, "edit_file", path="run.sh", old_string="one", new_string="two")
    assert os.stat(script).st_mode & 0o777 == 0o755
