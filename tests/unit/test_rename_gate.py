"""The permission gate judges every file a rename would change, not only the one the call
names: a rule or a sensitive path that guards another of them guards the rename. Against a
real basedpyright, on the project of test_code_intel_tools (app.py calls billing.py's
`compute_total`)."""

from pathlib import Path

import pytest
import trio

from tests.unit.test_code_intel_tools import answer_once_indexed, context, project
from tests.unit.test_lsp_pool import serving
from tether.daemon.lsp.pool import LspPool
from tether.daemon.sessions.approvals import call_facts, judge
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.rename_symbol import RenameSymbol, RenameSymbolParams
from tether.daemon.turn.permissions import PermissionPolicy, Verdict

__all__ = ["project"]  # the fixture, used by name

RENAME = RenameSymbolParams(path="app.py", line=5, symbol="compute_total", new_name="grand_total")


class _Planned:
    """Runs only the rename's planning (the server's answer), to wait out indexing."""

    async def run(self, params: RenameSymbolParams, ctx: ToolContext) -> str:
        return "\n".join(await RenameSymbol().edited_paths(params, ctx))


async def verdicts(project: Path, policies: list[PermissionPolicy]) -> list[Verdict]:
    pool = LspPool(project, builtin=["basedpyright"])
    ctx = context(project, pool)
    facts = call_facts(ToolRegistry(default_tools()), project, "rename_symbol", RENAME)
    assert facts.path == "app.py"
    with trio.fail_after(90):
        async with serving(pool):
            planned = await answer_once_indexed(_Planned(), RENAME, ctx)
            assert planned.splitlines() == ["app.py", "billing.py"]
            return [
                await judge(policy, facts, RenameSymbol(), RENAME, lambda: ctx)
                for policy in policies
            ]


@pytest.mark.language_servers
async def test_a_rule_on_another_file_of_the_rename_decides_it(project: Path) -> None:
    denied, asked, allowed, own = await verdicts(
        project,
        [
            PermissionPolicy(mode="edits", deny=["rename_symbol(billing.py)"]),
            PermissionPolicy(mode="edits", ask=["rename_symbol(billing*)"]),
            PermissionPolicy(mode="edits", deny=["rename_symbol(inventory.py)"]),
            PermissionPolicy(mode="ask", allow=["rename_symbol(app.py)"]),
        ],
    )
    assert (denied.action, denied.reason) == (
        "deny",
        "denied by the rule `rename_symbol(billing.py)`",
    )
    # Mode edits lets edits run, but not past an ask rule on a file the rename changes; the
    # "always" answer is not offered (its rule would name app.py, not billing.py).
    assert asked.action == "ask"
    assert asked.reason == "the rule `rename_symbol(billing*)` asks"
    assert asked.always_rule == ""
    # A rule on a file the rename does not change plays no part.
    assert (allowed.action, allowed.reason) == ("allow", "mode edits")
    # Allowing the named file does not allow the others: billing.py still asks in mode ask.
    assert (own.action, own.reason) == ("ask", "mode ask: edits ask first")
    for name in ("app.py", "billing.py"):
        assert "grand_total" not in (project / name).read_text()
