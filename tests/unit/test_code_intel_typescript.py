"""The code-intelligence tools against TypeScript 7's own server (`tsc --lsp --stdio`, the
user's install in tests/lsp7), in a workspace trusted and not: a project where app.ts imports
and calls `computeTotal` from billing.ts, and inventory.ts has an unrelated `computeTotal`."""

from pathlib import Path

import pytest
import trio

from tests.unit.test_code_intel_tools import answer_once_indexed
from tests.unit.test_lsp_pool import serving
from tests.unit.test_lsp_trust import Trust
from tests.unit.test_lsp_typescript import ts7_bin
from tether.daemon.lsp.pool import LspPool
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.code_intel import LSP_SERVICE, SymbolAtParams
from tether.daemon.tools.find_definition import FindDefinition
from tether.daemon.tools.find_references import FindReferences, FindReferencesParams
from tether.daemon.tools.hover import Hover
from tether.daemon.tools.rename_symbol import RenameSymbol, RenameSymbolParams
from tether.daemon.tools.symbols import Symbols, SymbolsParams

BILLING = """\
/** The sum of `prices` with `tax` added. */
export function computeTotal(prices: number[], tax = 0.2): number {
  return prices.reduce((sum, price) => sum + price, 0) * (1 + tax);
}
"""
APP = """\
import { computeTotal } from "./billing";

export function checkout(prices: number[]): number {
  return computeTotal(prices);
}

export function refund(prices: number[]): number {
  return -computeTotal(prices, 0);
}
"""
UNRELATED = """\
export function computeTotal(count: number): number {
  return count;
}

computeTotal(3);
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    (root / "package.json").write_text('{"name": "shop", "private": true}\n')
    (root / "tsconfig.json").write_text('{"compilerOptions": {"strict": true}}\n')
    (root / "billing.ts").write_text(BILLING)
    (root / "app.ts").write_text(APP)
    (root / "inventory.ts").write_text(UNRELATED)
    return root


def typescript_pool(root: Path, trusted: bool) -> LspPool:
    return LspPool(root, builtin=["typescript"], search_path=str(ts7_bin()), trusted=Trust(trusted))


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
async def test_the_tools_follow_the_import_not_the_name(project: Path, trusted: bool) -> None:
    pool = typescript_pool(project, trusted)
    ctx = ToolContext(project, services={LSP_SERVICE: pool})
    with trio.fail_after(120):
        async with serving(pool):
            found = await answer_once_indexed(
                FindDefinition(), SymbolAtParams(path="app.ts", line=4, symbol="computeTotal"), ctx
            )
            assert found.splitlines() == [
                "computeTotal is defined at:",
                "  billing.ts:2: export function computeTotal(prices: number[], tax = 0.2): "
                "number {",
            ]

            uses = await FindReferences().run(
                FindReferencesParams(path="billing.ts", line=2, symbol="computeTotal"), ctx
            )
            assert uses.splitlines() == [
                "2 uses of computeTotal in 1 file:",
                "app.ts",
                "  4: return computeTotal(prices);",
                "  8: return -computeTotal(prices, 0);",
            ]

            signature = await Hover().run(
                SymbolAtParams(path="app.ts", line=8, symbol="computeTotal"), ctx
            )
            # Asked for Markdown, the server fences the signature and puts the doc comment
            # on a line of its own (in plain text it runs the two together).
            assert signature.splitlines() == [
                "```typescript",
                "(alias) function computeTotal(prices: number[], tax?: number): number",
                "```",
                "The sum of `prices` with `tax` added.",
            ]

            # TypeScript 7 answers workspace/symbol: both namesakes, each where it is.
            searched = await Symbols().run(SymbolsParams(query="computeTotal"), ctx)
            assert searched.splitlines() == [
                "2 symbols matching 'computeTotal':",
                "  function computeTotal billing.ts:2",
                "  function computeTotal inventory.ts:1",
            ]
            outline = await Symbols().run(SymbolsParams(path="app.ts"), ctx)
            assert "  function checkout 3-5" in outline.splitlines()
            assert "  function refund 7-9" in outline.splitlines()


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
async def test_rename_from_a_call_renames_the_function_not_the_import(
    project: Path, trusted: bool
) -> None:
    """TypeScript would rather alias the import (`computeTotal as grandTotal`) and leave
    billing.ts alone; the rename asked for is of the function, in every file."""
    pool = typescript_pool(project, trusted)
    ctx = ToolContext(project, services={LSP_SERVICE: pool})
    with trio.fail_after(120):
        async with serving(pool):
            done = await answer_once_indexed(
                _Rename(),
                RenameSymbolParams(
                    path="app.ts", line=4, symbol="computeTotal", new_name="grandTotal"
                ),
                ctx,
            )
            local = await RenameSymbol().run(
                RenameSymbolParams(path="app.ts", line=3, symbol="checkout", new_name="payNow"),
                ctx,
            )
    assert done == ("Renamed computeTotal to grandTotal in 2 files (app.ts, billing.ts): 4 places.")
    assert local.text == "Renamed checkout to payNow in 1 file (app.ts): 1 place."
    assert (project / "billing.ts").read_text() == BILLING.replace("computeTotal", "grandTotal")
    assert (project / "app.ts").read_text() == APP.replace("computeTotal", "grandTotal").replace(
        "checkout", "payNow"
    )
    assert (project / "inventory.ts").read_text() == UNRELATED


class _Rename:
    async def run(self, params: RenameSymbolParams, ctx: ToolContext) -> str:
        return (await RenameSymbol().run(params, ctx)).text
