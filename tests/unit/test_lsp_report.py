"""The report for the model and the diagnostics for the wire."""

from pathlib import Path

from tether.daemon.lsp.diagnostics import Coverage, Diagnostic, Severity, Unanswered
from tether.daemon.lsp.report import format_report, wire_diagnostics
from tether.protocol.events import Diagnostic as WireDiagnostic


def diag(
    path: str,
    line: int,
    message: str,
    source: str = "basedpyright",
    *,
    column: int = 1,
    severity: Severity = "error",
    code: str = "",
) -> Diagnostic:
    return Diagnostic(
        path=path,
        line=line,
        column=column,
        severity=severity,
        message=message,
        source=source,
        code=code,
    )


def test_report_lists_errors_relative_with_a_limit(tmp_path: Path) -> None:
    app = str(tmp_path / "src" / "app.py")
    diagnostics = [
        diag(app, 3, 'Type "str" is not assignable\n\xa0\xa0to "int"', code="reportAssignmentType"),
        diag(app, 4, "unused", severity="warning"),
        *[diag(app, 10 + n, f"problem {n}", source="Ruff", code="F821") for n in range(17)],
    ]
    report = format_report(diagnostics, tmp_path).splitlines()
    assert report[0] == "Errors reported by language servers:"
    assert report[1] == (
        'src/app.py:3:1: error: Type "str" is not assignable; to "int" '
        "[basedpyright reportAssignmentType]"
    )
    assert report[2] == "src/app.py:10:1: error: problem 0 [Ruff F821]"
    assert len(report) == 1 + 15 + 1
    assert report[-1] == "... and 3 more"
    assert format_report(diagnostics[1:2], tmp_path) == ""


def test_report_leaves_out_the_same_spot_from_another_server(tmp_path: Path) -> None:
    app = str(tmp_path / "app.py")
    diagnostics = [
        diag(app, 2, "Undefined name `x`", source="Ruff", code="F821", column=7),
        diag(app, 2, '"x" is not defined', code="reportUndefinedVariable", column=7),
        diag(app, 3, "Expected parameter name", column=7),
        diag(app, 3, "Position-only parameter separator not allowed", column=7),
    ]
    assert format_report(diagnostics, tmp_path).splitlines()[1:] == [
        "app.py:2:7: error: Undefined name `x` [Ruff F821]",
        "app.py:3:7: error: Expected parameter name [basedpyright]",
        "app.py:3:7: error: Position-only parameter separator not allowed [basedpyright]",
    ]


def test_wire_diagnostics_carry_every_field_with_workspace_relative_paths(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "src").mkdir(parents=True)
    workspace = tmp_path / "link"
    workspace.symlink_to(real)  # the pool reports resolved paths; the workspace may not be
    outside = str(tmp_path / "elsewhere.py")
    diagnostics = [
        diag(str(real / "src" / "app.py"), 3, "bad", column=5, code="reportAssignmentType"),
        diag(outside, 1, "unused", source="Ruff", severity="warning", code="F401"),
    ]
    assert wire_diagnostics(diagnostics, workspace) == [
        WireDiagnostic(
            path="src/app.py",
            line=3,
            column=5,
            severity="error",
            message="bad",
            source="basedpyright",
            code="reportAssignmentType",
        ),
        WireDiagnostic(
            path=outside,
            line=1,
            column=1,
            severity="warning",
            message="unused",
            source="Ruff",
            code="F401",
        ),
    ]


def test_report_says_who_checked_and_who_did_not(tmp_path: Path) -> None:
    app = str(tmp_path / "app.py")
    both = Coverage(checked=["basedpyright", "ruff"])
    assert format_report([], tmp_path, coverage=both) == (
        "No errors reported by language servers (checked by basedpyright, ruff)."
    )
    assert format_report([diag(app, 2, "bad")], tmp_path, coverage=both).splitlines() == [
        "Errors reported by language servers:",
        "app.py:2:1: error: bad [basedpyright]",
        "Checked by basedpyright, ruff.",
    ]
    # Nobody answered: no "no errors" line, only what is unknown.
    late = Unanswered("basedpyright", "still starting: no answer within 10 s")
    silent = Coverage(unanswered=[late])
    assert format_report([], tmp_path, coverage=silent) == (
        "Not checked by basedpyright (still starting: no answer within 10 s): their errors "
        "are unknown."
    )
    # No server for the files (an empty coverage): nothing to say.
    assert format_report([], tmp_path, coverage=Coverage()) == ""
