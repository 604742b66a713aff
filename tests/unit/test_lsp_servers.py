"""Server specs, config merging, program lookup."""

import sys
from pathlib import Path

import pytest

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
        ("tsc", "--lsp", "--stdio"),
        ("tsgo", "--lsp", "--stdio"),
        ("typescript-language-server", "--stdio"),
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
