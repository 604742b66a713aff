"""A turn's context (open file, cursor, selection, mentions) over real files in temporary
folders, and `@path` mentions in CLI prompts."""

import os
import re
from pathlib import Path

import pytest

from tether.clients.cli.mentions import parse_cli_mentions
from tether.daemon.context.mentions import (
    FILES_BUDGET,
    READ_LIMIT,
    SELECTION_CAP,
    file_shares,
    render_context,
)
from tether.daemon.truncate import cap_result


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    (root / "README.md").write_text("# Demo\n")
    return root


FILE = re.compile(
    r'<file path="([^"]+)" characters="(\d+)"( truncated="true")?>\n(.*?)\n</file>', re.S
)


def attached(block: str) -> dict[str, str]:
    return {m.group(1): m.group(4) for m in FILE.finditer(block)}


def test_nothing_to_say(workspace: Path) -> None:
    assert render_context(workspace) == ("", [])
    assert render_context(workspace, selection="  \n") == ("", [])


def test_a_mentioned_file_is_attached_whole(workspace: Path) -> None:
    block, problems = render_context(workspace, mentions=["src/app.py", "./src/app.py"])
    assert problems == []
    assert block.startswith("<context>\n")
    assert block.endswith("\n</context>")
    assert attached(block) == {"src/app.py": "def greet(name):\n    return f'hello {name}'\n"}
    assert '<file path="src/app.py" characters="44">' in block


def test_files_share_40000_characters_fairly_and_are_middle_truncated(workspace: Path) -> None:
    (workspace / "small.txt").write_text("s" * 5_000)
    big = "HEAD" + "b" * 59_992 + "TAIL"
    (workspace / "big.txt").write_text(big)
    (workspace / "mid.txt").write_text("m" * 20_000)
    block, problems = render_context(workspace, mentions=["big.txt", "small.txt", "mid.txt"])
    assert problems == [  # each cut is reported with how much was left out
        "big.txt: 60,000 characters, attached cut to 17,500 (42,500 left out of the middle;"
        " the files and texts sent with a message share 40,000)",
        "mid.txt: 20,000 characters, attached cut to 17,500 (2,500 left out of the middle;"
        " the files and texts sent with a message share 40,000)",
    ]
    files = attached(block)
    assert files["small.txt"] == "s" * 5_000
    assert len(files["mid.txt"]) <= 17_500
    assert "characters cut here" in files["mid.txt"]
    assert len(files["big.txt"]) <= 17_500
    assert files["big.txt"].startswith("HEAD")
    assert files["big.txt"].endswith("TAIL")
    assert sum(len(text) for text in files.values()) <= FILES_BUDGET
    assert '<file path="big.txt" characters="60000" truncated="true">' in block
    assert '<file path="small.txt" characters="5000">' in block


def test_file_shares() -> None:
    assert file_shares([], 40_000) == []
    assert file_shares([100, 200], 40_000) == [100, 200]
    assert file_shares([5_000, 60_000, 20_000], 40_000) == [5_000, 17_500, 17_500]
    assert file_shares([50_000] * 3, 40_000) == [13_333, 13_333, 13_334]
    assert sum(file_shares([10, 90_000, 7, 30_000], 40_000)) == 40_000


def test_a_file_larger_than_the_read_limit_keeps_its_head_and_tail(workspace: Path) -> None:
    size = READ_LIMIT * 3
    with (workspace / "huge.log").open("w") as file:
        file.write("FIRST LINE\n")
        file.write("x" * (size - 22))
        file.write("\nLAST LINE\n")
    block, problems = render_context(workspace, mentions=["huge.log"])
    assert [p.split(" (")[0] for p in problems] == [
        "huge.log: 3,145,728 characters, attached cut to 40,000"
    ]
    text = attached(block)["huge.log"]
    assert len(text) <= FILES_BUDGET
    assert text.startswith("FIRST LINE\n")
    assert text.endswith("\nLAST LINE\n")
    assert "characters cut here" in text
    # Read only at both ends, it is cut exactly as its whole text would be.
    assert text == cap_result((workspace / "huge.log").read_text(), FILES_BUDGET)


def test_a_folder_is_listed_with_its_first_100_entries(workspace: Path) -> None:
    many = workspace / "many"
    many.mkdir()
    for i in range(150):
        (many / f"f{i:03}.txt").write_text("")
    (many / "a-sub").mkdir()
    block, problems = render_context(workspace, mentions=["many", "src/"])
    assert problems == []
    listing = re.search(
        r'<folder path="many/" entries="151" shown="100">\n(.*?)\n</folder>', block, re.S
    )
    assert listing is not None
    lines = listing.group(1).splitlines()
    assert lines[0] == "a-sub/"
    assert lines[1:100] == [f"f{i:03}.txt" for i in range(99)]
    assert lines[100] == "… and 51 more entries (not shown)"
    assert '<folder path="src/" entries="1">\napp.py\n</folder>' in block


def test_paths_outside_the_workspace_are_reported_not_dropped(workspace: Path) -> None:
    secret = workspace.parent / "secret.txt"
    secret.write_text("TOKEN=abc")
    (workspace / "link.txt").symlink_to(secret)
    block, problems = render_context(
        workspace, mentions=["../secret.txt", str(secret), "link.txt", "missing.py", "README.md"]
    )
    assert "TOKEN" not in block
    assert problems == [
        "../secret.txt: outside the workspace; not attached",
        f"{secret}: outside the workspace; not attached",
        "link.txt: outside the workspace; not attached",
        "missing.py: not found; not attached",
    ]
    assert (
        "Mentioned by the user but not attached: ../secret.txt (outside the workspace); "
        f"{secret} (outside the workspace); link.txt (outside the workspace); "
        "missing.py (not found)."
    ) in block
    assert attached(block) == {"README.md": "# Demo\n"}


def test_a_binary_file_is_reported(workspace: Path) -> None:
    (workspace / "logo.png").write_bytes(b"\x89PNG\x00\x00\x01")
    block, problems = render_context(workspace, mentions=["logo.png"])
    assert problems == ["logo.png: a binary file; not attached"]
    assert "logo.png (a binary file)" in block


def test_open_file_cursor_and_a_capped_selection(workspace: Path) -> None:
    selection = "START" + "s" * 9_990 + "END!!"
    block, problems = render_context(
        workspace, open_file="src/app.py", cursor=(2, 5), selection=selection
    )
    assert problems == []
    assert "The user's editor has src/app.py open, cursor at line 2, column 5." in block
    match = re.search(r'<selection file="src/app.py">\n(.*?)\n</selection>', block, re.S)
    assert match is not None
    assert len(match.group(1)) <= SELECTION_CAP
    assert match.group(1).startswith("START")
    assert match.group(1).endswith("END!!")
    assert "characters cut here" in match.group(1)


def test_an_open_file_outside_the_workspace_is_reported(workspace: Path) -> None:
    block, problems = render_context(workspace, open_file="/etc/hosts", selection="127.0.0.1")
    assert problems == ["/etc/hosts: the open file is outside the workspace"]
    assert "The user's editor has /etc/hosts open (outside the workspace)." in block
    assert '<selection file="/etc/hosts">\n127.0.0.1\n</selection>' in block


def test_a_selection_without_an_open_file(workspace: Path) -> None:
    block, _ = render_context(workspace, selection="x = 1")
    assert block == "<context>\n<selection>\nx = 1\n</selection>\n</context>"


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("fix @src/app.py please", ["src/app.py"]),
        ("look at @src/app.py.", ["src/app.py"]),
        ("compare @a.py, @b.py and @c/!", ["a.py", "b.py", "c/"]),
        (
            "read @\"docs/my notes.md\" and @'other file.txt'",
            ["docs/my notes.md", "other file.txt"],
        ),
        ("(see @README.md)", ["README.md"]),
        ("@start.py at the start", ["start.py"]),
        ("mail me at someone@example.com", []),
        ("twice @x.py and @x.py", ["x.py"]),
        ("the root @. and its parent @..", [".", ".."]),
        ("a lone @ sign", []),
        ("", []),
    ],
)
def test_parse_cli_mentions(prompt: str, expected: list[str]) -> None:
    assert parse_cli_mentions(prompt) == expected


def test_parsed_mentions_render(workspace: Path) -> None:
    prompt = 'explain @src/app.py and @"README.md"'
    block, problems = render_context(workspace, mentions=parse_cli_mentions(prompt))
    assert problems == []
    assert set(attached(block)) == {"src/app.py", "README.md"}


def test_special_files_and_unusable_paths_are_reported(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    block, problems = render_context(workspace, mentions=["pipe", "bad\x00name"])
    assert problems == [
        "pipe: not a regular file; not attached",
        "bad\x00name: not a usable path; not attached",
    ]
    assert "<file" not in block


def test_a_name_too_long_for_the_file_system_is_reported_not_raised(workspace: Path) -> None:
    long = "x" * 5000
    block, problems = render_context(workspace, mentions=[long, "src/app.py"])
    assert problems == [f"{long}: File name too long; not attached"]
    assert '<file path="src/app.py"' in block


def test_names_are_quoted_in_attributes(workspace: Path) -> None:
    (workspace / 'say "hi".txt').write_text("hi")
    block, _ = render_context(workspace, mentions=['say "hi".txt'])
    assert '<file path="say &quot;hi&quot;.txt" characters="2">\nhi\n</file>' in block


def test_paths_are_shown_relative_to_the_workspace_however_they_were_given(
    workspace: Path,
) -> None:
    (workspace / "link").symlink_to(workspace / "src")
    block, problems = render_context(
        workspace,
        open_file=str(workspace / "link" / "app.py"),
        mentions=[".", str(workspace / "README.md"), "link/"],
    )
    assert problems == []
    assert "The user's editor has src/app.py open." in block
    assert '<folder path="./"' in block
    assert '<folder path="src/"' in block
    assert set(attached(block)) == {"README.md"}


ATTACHMENT = re.compile(
    r'<attachment name="([^"]+)" characters="(\d+)"( truncated="true")?>\n(.*?)\n</attachment>',
    re.S,
)


def test_attachments_share_the_files_budget(workspace: Path) -> None:
    (workspace / "big.txt").write_text("f" * 30_000)
    piped = "log line\n" * 5_000  # 45,000 characters
    block, problems = render_context(
        workspace, mentions=["big.txt"], attachments=[("stdin", piped)]
    )
    assert [p.split(" (")[0] for p in problems] == [
        "stdin: 45,000 characters, attached cut to 20,000",
        "big.txt: 30,000 characters, attached cut to 20,000",
    ]
    [(name, length, truncated, text)] = ATTACHMENT.findall(block)
    assert (name, int(length), truncated) == ("stdin", len(piped), ' truncated="true"')
    assert text == cap_result(piped, FILES_BUDGET // 2)
    assert attached(block)["big.txt"] == cap_result("f" * 30_000, FILES_BUDGET // 2)


def test_a_small_attachment_is_whole_and_a_binary_one_reported(workspace: Path) -> None:
    block, problems = render_context(
        workspace, attachments=[("stdin", "a & b\n"), ("blob", "\x7fELF\0\0")]
    )
    assert ATTACHMENT.findall(block) == [("stdin", "6", "", "a & b\n")]
    assert problems == ["blob: binary; not attached"]
    assert "blob (binary)" in block


def test_other_open_files_are_named_not_attached(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("SECRET CONTENT")
    outside = workspace.parent / "elsewhere.py"
    outside.write_text("x")
    many = [f"f{i}.py" for i in range(30)]
    block, problems = render_context(
        workspace,
        open_file="src/app.py",
        open_files=["src/app.py", "notes.txt", "./notes.txt", str(outside), *many],
    )
    assert problems == []
    line = next(p for p in block.split("\n") if p.startswith("Also open in the editor: "))
    named = line.removeprefix("Also open in the editor: ").removesuffix(".").split(", ")
    assert named == ["notes.txt", *many[:19]]
    assert "SECRET CONTENT" not in block
    assert "elsewhere" not in block
