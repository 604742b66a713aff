""" "No errors" told from "not checked": a server still starting is waited for longer (its
first analysis), and the call says which servers spoke about the files and which did not,
against real basedpyright and ruff and the scripted fake server of test_lsp_pool."""

from pathlib import Path

import pytest
import trio

from tests.unit.test_lsp_pool import BROKEN, FAKE_SERVER, fake, serving
from tether.daemon.lsp.diagnostics import Coverage, Unanswered
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.report import format_report


@pytest.fixture
def fake_server(tmp_path: Path) -> Path:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return script


TYPE_ERROR = "def double(value: int) -> int:\n    return value * 2\n\n\nresult: str = double(2)\n"


async def test_a_cold_type_checker_is_waited_for_past_the_warm_wait(workspace: Path) -> None:
    """The first edit after the daemon starts: basedpyright, cold, loads its project for
    longer than the warm wait — here none at all, so that without the longer wait the call
    could only come back empty. The call waits for its first analysis (ending on its answer,
    not at a deadline the test would never let it reach) and says it checked the file."""
    app = workspace / "app.py"
    app.write_text(TYPE_ERROR)
    pool = LspPool(workspace, builtin=["basedpyright"], diagnostics_wait=0, first_wait=3600)
    with trio.fail_after(120):
        async with serving(pool):
            check = await pool.check_after_edit([app])
    assert [(d.line, d.source) for d in check.errors] == [(5, "basedpyright")]
    assert check.coverage == Coverage(checked=["basedpyright"])
    report = format_report(check.errors, workspace, coverage=check.coverage)
    assert report.splitlines()[0] == "Errors reported by language servers:"
    assert report.splitlines()[-1] == "Checked by basedpyright."


async def test_a_clean_file_says_who_checked_it(workspace: Path) -> None:
    app = workspace / "app.py"
    app.write_text("value = 1\n")
    pool = LspPool(workspace, builtin=["ruff"])
    with trio.fail_after(60):
        async with serving(pool):
            check = await pool.check_after_edit([app], first_wait=3600)
    assert check.errors == []
    assert format_report(check.errors, workspace, coverage=check.coverage) == (
        "No errors reported by language servers (checked by ruff)."
    )


async def test_servers_that_did_not_answer_are_named_with_why(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    """ruff answers; the fake runs and never answers: first as a starting server (the longer
    wait, once), then as a running one; one that failed to start says why."""
    app = workspace / "app.py"
    app.write_text(BROKEN)
    pool = LspPool(
        workspace,
        [
            fake(fake_server, "hang-after-init", tmp_path / "log"),
            fake(fake_server, "hang", tmp_path / "log2", name="mute"),
        ],
        builtin=["ruff"],
        initialize_timeout=0.3,
        shutdown_timeout=0.2,
    )
    with trio.fail_after(60):
        async with serving(pool):
            cold = await pool.check_after_edit([app], wait=0.1, first_wait=0.4)
            warm = await pool.check_after_edit([app], wait=0.1, first_wait=0.4)
    assert cold.errors
    assert cold.coverage == Coverage(
        checked=["ruff"],
        unanswered=[
            Unanswered("fake", "still starting: no answer within 0.4 s"),
            Unanswered("mute", "did not answer initialize within 0.3 s"),
        ],
    )
    assert warm.coverage.unanswered[0] == Unanswered("fake", "no answer within 0.1 s")
    report = format_report(cold.errors, workspace, coverage=cold.coverage).splitlines()
    assert report[-2] == "Checked by ruff."
    assert report[-1] == (
        "Not checked by fake (still starting: no answer within 0.4 s); mute (did not answer "
        "initialize within 0.3 s): their errors are unknown."
    )
