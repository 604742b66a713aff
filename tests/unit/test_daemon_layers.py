"""The daemon's packages import only the layers below them (docs/architecture.md draws them).

Every import counts, the ones inside functions too: a cycle hidden in a function-level import
is still a cycle. `daemon/testing/` is on disk beside the daemon but installs as a package of
its own, `tether.testing` (the scripted model server), which imports nothing of tether but
itself."""

import ast
import functools
import sys
from pathlib import Path

from tests.unit.test_import_cycles import import_cycles

DAEMON = Path(__file__).resolve().parents[2] / "daemon"
TESTING = DAEMON / "testing"

LOWER = {
    "truncate": set[str](),
    "workspace": set[str](),
    "nursery": set[str](),
    "coalesce": set[str](),
    "private_json": set[str](),
    "workspace_trust": {"private_json"},
    "logs": set[str](),
    "lean_imports": set[str](),
    "pathglob": set[str](),
    "beneath": set[str](),
    "worktrees": set[str](),
    "providers": {"logs"},
    "procs": {"logs", "nursery", "truncate"},
    "lsp": {"beneath", "logs", "nursery", "procs", "truncate", "workspace"},
    "mcp": {"logs", "nursery", "private_json", "procs", "truncate", "workspace"},
    "config": {"logs", "lsp", "mcp", "nursery", "procs", "truncate", "workspace"},
    "skills": {
        "beneath",
        "logs",
        "pathglob",
        "private_json",
        "truncate",
        "workspace",
        "workspace_trust",
    },
    "tools": {
        "beneath",
        "logs",
        "lsp",
        "mcp",
        "nursery",
        "pathglob",
        "procs",
        "providers",
        "skills",
        "truncate",
        "workspace",
        "workspace_trust",
    },
    "context": {
        "beneath",
        "logs",
        "pathglob",
        "providers",
        "skills",
        "tools",
        "nursery",
        "procs",
        "truncate",
        "workspace",
        "workspace_trust",
    },
    "turn": {
        "beneath",
        "logs",
        "pathglob",
        "context",
        "providers",
        "skills",
        "tools",
        "nursery",
        "procs",
        "truncate",
        "workspace",
        "workspace_trust",
    },
}
LOWER["hooks"] = {"config", "lsp", "turn", *LOWER["turn"]}
LOWER["sessions"] = {
    "coalesce",
    "config",
    "hooks",
    "lsp",
    "mcp",
    "turn",
    "worktrees",
    *LOWER["turn"],
}
LOWER["rpc"] = {"sessions", *LOWER["sessions"]}
LOWER["server"] = {"rpc", "private_json", *LOWER["rpc"]}
LOWER["__main__"] = {"server", "lean_imports", *LOWER["server"]}
"""Each part of the daemon, and the parts it may import."""


def _part(path: Path) -> str:
    rel = path.relative_to(DAEMON)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@functools.cache  # the daemon's modules are parsed once for all the tests here
def _imported_names(path: Path) -> frozenset[str]:
    """Every dotted name an import in `path` may bring in: `from a import b` gives `a` and
    `a.b` (b may be a module). Relative imports are refused, so none slips past the checks."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            assert node.module is not None
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return frozenset(found)


def _imported_parts(path: Path) -> set[str]:
    found: set[str] = set()
    for name in _imported_names(path):
        parts = name.split(".")
        if parts[:2] == ["tether", "daemon"] and len(parts) > 2:
            found.add(parts[2])
    return found


def _modules() -> list[Path]:
    return [
        p
        for p in DAEMON.rglob("*.py")
        if (p.name != "__init__.py" or p.parent != DAEMON) and TESTING not in p.parents
    ]


def test_every_part_of_the_daemon_has_a_place_in_the_layers() -> None:
    assert {_part(path) for path in _modules()} <= set(LOWER)


def test_each_part_imports_only_the_layers_below_it() -> None:
    wrong = [
        f"{path.relative_to(DAEMON.parent)} imports tether.daemon.{other}"
        for path in _modules()
        for other in sorted(_imported_parts(path))
        if other in LOWER and other != _part(path) and other not in LOWER[_part(path)]
    ]
    assert wrong == []


def test_the_layers_have_no_cycle() -> None:
    for part, lower in LOWER.items():
        assert part not in lower
        for other in lower:
            assert part not in LOWER[other], f"{part} and {other} import each other"


def _module_name(path: Path) -> str:
    parts = ["tether", *path.relative_to(DAEMON.parent).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_of_the_daemon_imports_itself_through_others() -> None:
    paths = {_module_name(path): path for path in _modules()}
    imports = {name: (_imported_names(path) & set(paths)) - {name} for name, path in paths.items()}
    assert import_cycles(imports) == []


def test_the_model_server_imports_only_the_standard_library_and_itself() -> None:
    modules = sorted(TESTING.rglob("*.py"))
    assert modules, "daemon/testing/ holds no modules"
    wrong = [
        f"{path.relative_to(DAEMON.parent)} imports {name}"
        for path in modules
        for name in sorted(_imported_names(path))
        if name.split(".")[0] not in {*sys.stdlib_module_names, "__future__"}
        and name.split(".")[:2] != ["tether", "testing"]
    ]
    assert wrong == []


def test_the_daemon_does_not_import_the_model_server() -> None:
    wrong = [
        f"{path.relative_to(DAEMON.parent)} imports {name}"
        for path in _modules()
        for name in sorted(_imported_names(path))
        if name.split(".")[:2] == ["tether", "testing"] or name.startswith("tether.daemon.testing")
    ]
    assert wrong == []
