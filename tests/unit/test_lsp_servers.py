"""Server specs, config merging, program lookup, columns and the report for the model."""

import sys
from pathlib import Path

import pytest

from tether.daemon.lsp.pool import Diagnostic, Severity, character_to_column, format_report
from tether.daemon.lsp.servers import (
    BUILTIN_SERVERS,
    LspServerConfig,
    ServerSpec,
    available_servers,
    find_program,
    merge_specs,
    resolve_command,
)


def spec(name: str) -> ServerSpec:
    return next(s for s in merge_specs() if s.name == name)


def test_builtins_cover_the_languages() -> None:
    by_extension = {ext: s.name for s in BUILTIN_SERVERS for ext in s.extensions}
    assert by_extension[".go"] == "gopls"
    assert by_extension[".cpp"] == "clangd"
    assert by_extension[".tsx"] == "typescript"
    assert {s.name for s in BUILTIN_SERVERS if ".py" in s.extensions} == {
        "basedpyright",
        "pyright",
        "ruff",
    }
    assert spec("typescript").commands == (
        ("typescript-language-server", "--stdio"),
        ("tsgo", "--lsp", "--stdio"),
        ("tsc", "--lsp", "--stdio"),
    )


def test_dev_dependencies_are_found_next_to_the_interpreter() -> None:
    """With an empty PATH, ruff and basedpyright-langserver are still found in the venv."""
    venv_bin = Path(sys.executable).parent
    assert find_program("ruff", path="") == str(venv_bin / "ruff")
    assert resolve_command(spec("basedpyright"), path="") == [
        str(venv_bin / "basedpyright-langserver"),
        "--stdio",
    ]
    assert find_program("no-such-language-server", path="") is None
    assert find_program("/no/such/path/server") is None


def test_a_group_runs_only_its_first_installed_member() -> None:
    available = {a.name: a.command for a in available_servers(merge_specs(), path="")}
    assert available["basedpyright"] is not None
    assert available["pyright"] is None  # the same group, and basedpyright came first
    assert available["gopls"] is None or "gopls" in available["gopls"][0]


def test_config_adds_changes_and_disables_servers() -> None:
    specs = merge_specs(
        [
            LspServerConfig(
                name="rust",
                command=["rust-analyzer"],
                extensions=["rs", ".RS"],
                root_markers=["Cargo.toml"],
            ),
            LspServerConfig(name="ruff", command=["ruff", "server", "--preview"]),
            LspServerConfig(name="basedpyright", settings={"basedpyright": {"analysis": {}}}),
            LspServerConfig(name="gopls", enabled=False),
        ]
    )
    by_name = {s.name: s for s in specs}
    assert "gopls" not in by_name
    assert by_name["rust"].extensions == frozenset({".rs"})
    assert by_name["rust"].root_markers == ("Cargo.toml",)
    assert by_name["ruff"].commands == (("ruff", "server", "--preview"),)
    assert by_name["ruff"].extensions == frozenset({".py", ".pyi"})
    assert by_name["basedpyright"].settings == {"basedpyright": {"analysis": {}}}
    assert by_name["basedpyright"].commands == spec("basedpyright").commands
    assert [s.name for s in merge_specs(builtin=["ruff"])] == ["ruff"]
    assert merge_specs(builtin=False) == []
    with pytest.raises(ValueError, match="needs a command and extensions"):
        merge_specs([LspServerConfig(name="new", command=["x"])])


def test_root_is_the_nearest_marked_folder_inside_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    package = workspace / "packages" / "one"
    (package / "src").mkdir(parents=True)
    (package / "pyproject.toml").write_text("")
    (tmp_path / "pyproject.toml").write_text("")  # above the workspace: not looked at
    pyright = spec("basedpyright")
    assert pyright.root_for(package / "src" / "a.py", workspace) == package
    assert pyright.root_for(workspace / "b.py", workspace) == workspace
    assert pyright.root_for(workspace / "packages" / "c.py", workspace) == workspace
    assert spec("ruff").root_for(package / "src" / "a.py", workspace) == workspace
    assert pyright.language_for(Path("x.pyi")) == "python"
    assert spec("typescript").language_for(Path("x.tsx")) == "typescriptreact"


@pytest.mark.parametrize(
    ("line", "character", "encoding", "column"),
    [
        ("x = 1", 4, "utf-16", 5),
        ('s = "😀"; x', 10, "utf-16", 10),  # the emoji is two UTF-16 units
        ('s = "😀"; x', 9, "utf-32", 10),
        ('s = "😀"; x', 12, "utf-8", 10),  # and four UTF-8 bytes
        ("é = 1", 4, "utf-16", 5),
        ("", 3, "utf-16", 4),
        ("abc", 0, "utf-16", 1),
    ],
)
def test_character_offsets_become_code_point_columns(
    line: str, character: int, encoding: str, column: int
) -> None:
    assert character_to_column(line, character, encoding) == column


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
