"""The binary-file rule, and that every reader of the user's files applies the same one:
read_file, edit_file, grep's Python search and mentions (files and attached text alike)."""

import json
from pathlib import Path

import pytest
import trio

from tether.daemon.context.mentions import render_context
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.binary import SNIFF_BYTES, is_binary
from tether.daemon.tools.edit_file import EditFile
from tether.daemon.tools.grep import Grep
from tether.daemon.tools.read_file import ReadFile
from tether.daemon.tools.registry import ToolRegistry, ToolResult

REGISTRY = ToolRegistry([ReadFile(), EditFile(), Grep(rg_path=None)])


def test_a_nul_in_the_head_makes_bytes_binary() -> None:
    assert not is_binary(b"")
    assert not is_binary(b"plain text\n\xff\xfe not utf-8 but no NUL")
    assert is_binary(b"\0")
    assert is_binary(b"x" * (SNIFF_BYTES - 1) + b"\0")
    assert not is_binary(b"x" * SNIFF_BYTES + b"\0")


def test_decoded_text_is_judged_by_the_same_rule() -> None:
    assert not is_binary("")
    assert is_binary("x" * (SNIFF_BYTES - 1) + "\0")
    assert not is_binary("x" * SNIFF_BYTES + "\0")


async def call(ws: Path, tool: str, **args: object) -> ToolResult:
    params = REGISTRY.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    with trio.fail_after(10):
        return await REGISTRY.run(tool, params, ToolContext(ws))


@pytest.mark.parametrize(("nul_at", "binary"), [(SNIFF_BYTES - 1, True), (SNIFF_BYTES, False)])
async def test_every_reader_draws_the_line_at_the_same_byte(
    tmp_path: Path, nul_at: int, binary: bool
) -> None:
    (tmp_path / "f.txt").write_bytes(b"needle\n" + b"x" * (nul_at - 7) + b"\0\n")

    read = await call(tmp_path, "read_file", path="f.txt")
    assert (read.status == "failed" and "binary" in read.output) is binary, read.output

    edit = await call(tmp_path, "edit_file", path="f.txt", old_string="needle", new_string="pin")
    assert edit.status == "failed"
    assert ("binary" in edit.output) is binary, edit.output

    found = await call(tmp_path, "grep", pattern="needle")
    assert found.status == "completed"
    assert (found.output == "f.txt") is not binary, found.output

    _, problems = render_context(tmp_path, mentions=["f.txt"])
    assert (problems == ["f.txt: a binary file; not attached"]) is binary, problems

    attached = "x" * nul_at + "\0"
    _, problems = render_context(tmp_path, attachments=[("pasted", attached)])
    assert (problems == ["pasted: binary; not attached"]) is binary, problems
