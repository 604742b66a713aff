"""No module of tether imports itself through others: a circle of imports works only while
the import that closes it stays inside a function or behind `TYPE_CHECKING`, and breaks on
the day someone moves it. Every import counts, the ones inside functions and under
`TYPE_CHECKING` too. Modules are named as they install, from pyproject's package-dir
mapping (`clients/jupyter/` is `tether.jupyter`, `daemon/testing/` is `tether.testing`)."""

import ast
import tomllib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    """Every module of tether by its installed name. A folder mapped on its own (say
    `clients/jupyter`) is named by its own package, not by the one holding the folder above."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    named: dict[Path, str] = {}
    # The deepest folders first, so theirs is the name a file keeps.
    for package, folder in sorted(package_dir.items(), key=lambda item: -len(item[1])):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in named:
                continue
            parts = [*package.split("."), *path.relative_to(ROOT / folder).with_suffix("").parts]
            named[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return {name: path for path, name in named.items()}


def _imported(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of tether that `path` imports: `from a import b` counts as `a.b` when that
    is a module, else as `a`; relative imports are resolved against `name`'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return (found & modules) - {name}


def import_cycles(imports: Mapping[str, AbstractSet[str]]) -> list[str]:
    """Each circle in `imports` (module -> the modules it imports), as `a -> b -> a`."""
    cycles: list[str] = []
    done: set[str] = set()

    def visit(name: str, chain: list[str]) -> None:
        if name in chain:
            cycles.append(" -> ".join([*chain[chain.index(name) :], name]))
            return
        if name in done:
            return
        for other in sorted(imports[name]):
            visit(other, [*chain, name])
        done.add(name)

    for name in sorted(imports):
        visit(name, [])
    return cycles


def test_the_modules_are_found_by_their_installed_names() -> None:
    modules = _modules()
    assert modules["tether.clients.core.rpc"] == ROOT / "clients" / "core" / "rpc.py"
    assert modules["tether.jupyter"] == ROOT / "clients" / "jupyter" / "__init__.py"
    assert modules["tether.testing.server"] == ROOT / "daemon" / "testing" / "server.py"
    assert "tether.clients.jupyter" not in modules


def test_the_finder_sees_a_circle_closed_inside_a_function(tmp_path: Path) -> None:
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("from pkg.second import helper\n")
    second.write_text("def later() -> None:\n    from pkg import first\n")
    modules = {"pkg.first", "pkg.second", "pkg"}
    imports = {
        "pkg.first": _imported("pkg.first", first, modules),
        "pkg.second": _imported("pkg.second", second, modules),
    }
    assert import_cycles(imports) == ["pkg.first -> pkg.second -> pkg.first"]


def test_no_module_of_tether_imports_itself_through_others() -> None:
    modules = _modules()
    imports = {name: _imported(name, path, set(modules)) for name, path in modules.items()}
    assert import_cycles(imports) == []
