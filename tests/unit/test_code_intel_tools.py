"""The code-intelligence tools (find_definition, find_references, symbols, hover) against a
real basedpyright, through the pool the daemon hands them, on a project where two modules
define a `compute_total` and only one of them is imported."""

from pathlib import Path

import pytest
import trio

from tests.unit.test_lsp_pool import serving
from tether.clients.acp import diffs
from tether.clients.acp.updates import TOOL_KINDS, tool_title
from tether.clients.core.text import tool_line
from tether.daemon.lsp.client import LspClient
from tether.daemon.lsp.navigation import (
    Location,
    PositionError,
    TextEdit,
    apply_edits,
    position_of,
    replaced_texts,
)
from tether.daemon.lsp.pool import Lease, LspPool
from tether.daemon.lsp.servers import LspServerConfig
from tether.daemon.lsp.types import Position, Range
from tether.daemon.tools.base import ToolContext, ToolFailure
from tether.daemon.tools.code_intel import (
    LSP_SERVICE,
    SymbolAtParams,
    located_line,
    source_lines,
)
from tether.daemon.tools.find_definition import FindDefinition
from tether.daemon.tools.find_references import FindReferences, FindReferencesParams
from tether.daemon.tools.hover import Hover
from tether.daemon.tools.rename_symbol import RenameSymbol, RenameSymbolParams, _plan_files
from tether.daemon.tools.symbols import Symbols, SymbolsParams
from tether.protocol.items import ToolCall

BILLING = '''\
def compute_total(prices: list[float], tax: float = 0.2) -> float:
    """The sum of `prices` with `tax` added."""
    return sum(prices) * (1 + tax)
'''
APP = """\
from billing import compute_total


def checkout(prices: list[float]) -> float:
    return compute_total(prices)


def refund(prices: list[float]) -> float:
    return -compute_total(prices, tax=0.0)
"""
UNRELATED = """\
def compute_total(count: int) -> int:
    return count


compute_total(3)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "0"\n')
    (root / "billing.py").write_text(BILLING)
    (root / "app.py").write_text(APP)
    (root / "inventory.py").write_text(UNRELATED)
    (root / "main.rs").write_text("fn main() {}\n")
    return root


def context(root: Path, pool: LspPool) -> ToolContext:
    return ToolContext(root, services={LSP_SERVICE: pool})


async def answer_once_indexed(tool: object, params: object, ctx: ToolContext) -> str:
    """The tool's answer, asked again while the server says it is still indexing (a server
    started by the call answers what it has analysed so far)."""
    run = getattr(tool, "run")  # noqa: B009
    while True:
        try:
            return await run(params, ctx)
        except ToolFailure as exc:
            if "still indexing" not in str(exc):
                raise
        # No server says when its indexing is done (tether ignores $/progress, which it need
        # not send); its first report on the file, which the pool waits for, comes after it
        # has analysed it: ask again then.
        pool = ctx.services[LSP_SERVICE]
        assert isinstance(pool, LspPool)
        await pool.check_after_edit([Path(getattr(params, "path"))], first_wait=60)  # noqa: B009


async def test_the_four_tools_follow_the_import_not_the_name(project: Path) -> None:
    pool = LspPool(project, builtin=["basedpyright"])
    ctx = context(project, pool)
    with trio.fail_after(90):
        async with serving(pool):
            found = await answer_once_indexed(
                FindDefinition(),
                SymbolAtParams(path="app.py", line=5, symbol="compute_total"),
                ctx,
            )
            assert found.splitlines()[:2] == [
                "compute_total is defined at:",
                "  billing.py:1: def compute_total(prices: list[float], tax: float = 0.2) "
                "-> float:",
            ]
            assert "inventory.py" not in found

            uses = await FindReferences().run(
                FindReferencesParams(path="billing.py", line=1, symbol="compute_total"), ctx
            )
            assert uses.splitlines() == [
                "3 uses of compute_total in 1 file:",
                "app.py",
                "  1: from billing import compute_total",
                "  5: return compute_total(prices)",
                "  9: return -compute_total(prices, tax=0.0)",
            ]
            bounded = await FindReferences().run(
                FindReferencesParams(path="app.py", line=9, symbol="compute_total", limit=1), ctx
            )
            # From the call site, the import is the declaration that is left out, and the
            # definition in billing.py is one more use.
            assert bounded.splitlines()[0] == "3 uses of compute_total in 2 files:"
            assert bounded.splitlines()[-1] == (
                "… 2 more uses not shown: app.py (1), billing.py (1) (raise limit to see them)."
            )

            signature = await Hover().run(
                SymbolAtParams(path="app.py", line=9, symbol="compute_total"), ctx
            )
            assert signature.startswith(
                "```python\n(function) def compute_total(\n    prices: list[float],"
            )
            assert "tax: float = 0.2\n) -> float" in signature
            assert "The sum of `prices` with `tax` added." in signature

            searched = await Symbols().run(SymbolsParams(query="compute_total"), ctx)
            lines = searched.splitlines()
            assert "  function compute_total billing.py:1" in lines
            assert "  function compute_total inventory.py:1" in lines

            outline = await Symbols().run(SymbolsParams(path="app.py"), ctx)
            assert "  function checkout 4-5" in outline.splitlines()
            assert "  function refund 8-9" in outline.splitlines()


async def test_a_language_without_a_server_is_said_plainly(project: Path) -> None:
    pool = LspPool(project, builtin=["basedpyright"])
    ctx = context(project, pool)
    with trio.fail_after(30):
        async with serving(pool):
            with pytest.raises(ToolFailure, match="rust-analyzer would"):
                await FindDefinition().run(
                    SymbolAtParams(path="main.rs", line=1, symbol="main"), ctx
                )


async def test_an_uninstalled_server_is_named_with_how_to_install_it(project: Path) -> None:
    # A built-in changed to a program that is nowhere stands for one not installed.
    pool = LspPool(
        project,
        [LspServerConfig(name="gopls", command=["no-such-gopls-program"])],
        builtin=["gopls"],
    )
    (project / "main.go").write_text("package main\n")
    ctx = context(project, pool)
    async with serving(pool):
        with pytest.raises(ToolFailure, match="gopls would, but it is not installed") as caught:
            await Hover().run(SymbolAtParams(path="main.go", line=1, symbol="main"), ctx)
    assert "go install golang.org/x/tools/gopls@latest" in str(caught.value)


async def test_without_the_pool_the_tools_say_so(project: Path) -> None:
    with pytest.raises(ToolFailure, match="not available"):
        await Hover().run(SymbolAtParams(path="app.py", line=1, symbol="x"), ToolContext(project))


def test_the_column_is_found_from_the_name_in_utf16_units() -> None:
    text = 'x = "😀"; compute_total(1)\nsubtotal = total\n'
    assert position_of(text, 1, "compute_total", None).character == text.index("compute") + 1
    assert position_of(text, 1, "compute_total", None, "utf-32").character == text.index("compute")
    # A whole word is preferred over the same letters inside another name.
    assert position_of(text, 2, "total", None).character == len("subtotal = ")
    assert position_of(text, 2, "", 3).character == 2
    with pytest.raises(PositionError, match="'missing' is not on line 2"):
        position_of(text, 2, "missing", None)
    with pytest.raises(PositionError, match="past the end"):
        position_of(text, 9, "x", None)


def test_clients_show_what_was_found() -> None:
    call = ToolCall(
        id="c1",
        call_id="k1",
        tool="find_definition",
        arguments='{"path": "app.py", "line": 5, "symbol": "compute_total"}',
        status="completed",
        output="compute_total is defined at:\n  billing.py:1: def compute_total():",
    )
    assert tool_line(call)[2] == " → billing.py:1"
    assert TOOL_KINDS["find_references"] == "search"
    assert tool_title(call) == "Definition of `compute_total` (app.py:5)"


async def test_rename_changes_every_use_and_leaves_the_namesake_alone(project: Path) -> None:
    pool = LspPool(project, builtin=["basedpyright"])
    ctx = context(project, pool)
    params = RenameSymbolParams(
        path="app.py", line=5, symbol="compute_total", new_name="grand_total"
    )
    with trio.fail_after(90):
        async with serving(pool):
            preview = await answer_once_indexed(_Preview(), params, ctx)
            assert (project / "app.py").read_text() == APP
            done = await RenameSymbol().run(params, ctx)
    assert "+++ b/billing.py" in preview
    assert done.diff == preview
    assert (
        done.text
        == "Renamed compute_total to grand_total in 2 files (app.py, billing.py): 4 places."
    )
    assert sorted(p.name for p in done.edited) == ["app.py", "billing.py"]
    assert (project / "app.py").read_text() == APP.replace("compute_total", "grand_total")
    assert (project / "billing.py").read_text() == BILLING.replace("compute_total", "grand_total")
    assert (project / "inventory.py").read_text() == UNRELATED
    # ACP shows the one diff as a diff per file, each whole.
    shown = {change.path.name: change for change in diffs.changes(done.diff, project)}
    assert sorted(shown) == ["app.py", "billing.py"]
    assert shown["billing.py"].new_text == (project / "billing.py").read_text()


class _Preview:
    async def run(self, params: RenameSymbolParams, ctx: ToolContext) -> str:
        return await RenameSymbol().preview(params, ctx)


def edit(line: int, start: int, end: int, new: str) -> TextEdit:
    return TextEdit(range=Range(start=Position(line, start), end=Position(line, end)), newText=new)


def test_edits_apply_in_utf16_units_and_say_what_they_replace() -> None:
    text = 'a = "😀"; old(1)\nold()\n'
    edits = [edit(1, 0, 3, "new"), edit(0, 10, 13, "new")]
    assert replaced_texts(text, edits) == ["old", "old"]
    assert apply_edits(text, edits) == 'a = "😀"; new(1)\nnew()\n'
    with pytest.raises(ValueError, match="overlap"):
        apply_edits(text, [edit(1, 0, 3, "x"), edit(1, 1, 2, "y")])


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        (".tether/skills/tool/helper.py", "skill folder"),
        (".env.py", "credential"),
        (".venv/lib/site.py", "installed dependency"),
        ("stale.py", "out of date"),
    ],
)
def test_a_rename_touching_what_it_must_not_is_refused_whole(
    tmp_path: Path, name: str, refusal: str
) -> None:
    root = tmp_path.resolve()
    (root / "ok.py").write_text("old = 1\n")
    target = root / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("other = old\n" if name == "stale.py" else "x = old\n")
    edits = {root / "ok.py": [edit(0, 0, 3, "new")], target: [edit(0, 4, 7, "new")]}
    with pytest.raises(ToolFailure, match=refusal):
        _plan_files(root, edits, "old", "utf-16")
    outside = {tmp_path.parent / "elsewhere.py": [edit(0, 0, 3, "new")]}
    with pytest.raises(ToolFailure, match="outside the workspace"):
        _plan_files(root, outside, "old", "utf-16")
    assert (root / "ok.py").read_text() == "old = 1\n"


async def test_source_lines_are_read_only_where_read_file_would_read(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET_OUTSIDE = 1\n")
    (root / "real.py").write_text("value = 1\n")
    (root / ".env.py").write_text("TOKEN = 'hunter2'\n")
    (root / "link.py").symlink_to(outside)
    places = [
        Location(path=root / name, line=1, end_line=1) for name in ("real.py", ".env.py", "link.py")
    ] + [Location(path=outside, line=1, end_line=1)]
    lease = Lease(
        client=LspClient(["true"], root),
        path=root / "real.py",
        uri="",
        text="value = 1\n",
        server="fake",
        just_started=False,
    )
    ctx = ToolContext(root)
    lines = await source_lines(ctx, places, lease)
    shown = [located_line(ctx, lines, place) for place in places]
    assert shown == ["real.py:1: value = 1", ".env.py:1", "link.py:1", f"{outside}:1"]
