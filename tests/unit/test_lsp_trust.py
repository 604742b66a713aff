"""Language servers in a workspace the user does not trust run none of its programs, against
real servers: basedpyright (a dev dependency) and typescript-language-server with the
TypeScript next to it (tests/lsp, installed by `npm ci --prefix tests/lsp`).

The hostile workspace carries the programs those servers pick up on their own: a
`node_modules/typescript/lib/tsserver.js` (or a Yarn SDK's) and a `.venv/bin/python`, each
writing a marker before it hands over to the real thing. Untrusted: a read, an edit and its
diagnostics leave no marker, and diagnostics still come. Trusted: the workspace's TypeScript
and interpreter are the ones used."""

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from tests.support import require_program
from tests.unit.test_lsp_pool import serving
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.servers import BUILTIN_SERVERS, RESTRICTED_NOTE, ServerSpec, restricted_form

LSP_MODULES = Path(__file__).resolve().parents[1] / "lsp" / "node_modules"
SERVER_BIN = LSP_MODULES / ".bin"
REAL_TSSERVER = LSP_MODULES / "typescript" / "lib" / "tsserver.js"

PY_ERROR = "value: int = 'text'\n"
TS_ERROR = "const value: number = 'text';\nexport { value };\n"


def spec_named(name: str) -> ServerSpec:
    return next(spec for spec in BUILTIN_SERVERS if spec.name == name)


class Hostile:
    """A workspace whose TypeScript and interpreter leave markers when they run."""

    def __init__(self, root: Path, typescript_in: str = "node_modules") -> None:
        self.root = root
        root.mkdir()
        self.ts_marker = root / "workspace-typescript-ran"
        self.python_marker = root / "workspace-python-ran"
        (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n')
        (root / "package.json").write_text('{"name": "demo", "private": true}\n')
        (root / "tsconfig.json").write_text('{"compilerOptions": {"strict": true}}\n')
        package = root / typescript_in / "typescript"
        (package / "lib").mkdir(parents=True)
        (package / "package.json").write_text('{"name": "typescript", "version": "5.9.3"}\n')
        (package / "lib" / "tsserver.js").write_text(
            f"require('fs').appendFileSync({json.dumps(str(self.ts_marker))}, 'ran\\n');\n"
            f"module.exports = require({json.dumps(str(REAL_TSSERVER))});\n"
        )
        python = root / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        python.write_text(
            f'#!/bin/sh\necho ran >> "{self.python_marker}"\nexec "{sys.executable}" "$@"\n'
        )
        python.chmod(0o755)
        self.app_py = root / "app.py"
        self.app_ts = root / "app.ts"

    def markers(self) -> list[str]:
        return [p.name for p in (self.ts_marker, self.python_marker) if p.exists()]


def search_path() -> str:
    """PATH with the tests' typescript-language-server first (CI installs it)."""
    require_program(str(SERVER_BIN / "typescript-language-server"), "npm ci --prefix tests/lsp")
    return os.pathsep.join([str(SERVER_BIN), os.environ.get("PATH", "")])


class Trust:
    def __init__(self, trusted: bool) -> None:
        self.trusted = trusted

    def __call__(self) -> bool:
        return self.trusted


def trust_pool(workspace: Path, trust: Trust) -> LspPool:
    """basedpyright and typescript-language-server for `workspace`, trusted as `trust` says."""
    return LspPool(
        workspace,
        builtin=["basedpyright", "typescript"],
        search_path=search_path(),
        trusted=trust,
    )


async def read_edit_diagnose(pool: LspPool, hostile: Hostile) -> list[tuple[str, int]]:
    """What a turn does: a read (the servers prewarm), an edit, its diagnostics; the errors
    as (file name, line)."""
    hostile.app_py.write_text("value: int = 1\n")
    hostile.app_ts.write_text("export const value: number = 1;\n")
    pool.prewarm([hostile.app_py, hostile.app_ts])
    hostile.app_py.write_text(PY_ERROR)
    hostile.app_ts.write_text(TS_ERROR)
    found = await pool.diagnostics_after_edit([hostile.app_py, hostile.app_ts], wait=20)
    return sorted({(Path(d.path).name, d.line) for d in found})


@pytest.mark.parametrize("typescript_in", ["node_modules", ".yarn/sdks"])
async def test_untrusted_runs_none_of_the_workspace_programs(
    tmp_path: Path, typescript_in: str
) -> None:
    hostile = Hostile(tmp_path / "ws", typescript_in)
    with trio.fail_after(90):
        async with serving(trust_pool(hostile.root, Trust(False))) as pool:
            errors = await read_edit_diagnose(pool, hostile)
            status = {s.name: s for s in pool.status()}
            note = pool.restricted_note()
    assert hostile.markers() == []
    assert errors == [("app.py", 1), ("app.ts", 1)]  # diagnostics still come
    assert status["basedpyright"].restricted
    assert status["typescript"].restricted
    assert status["basedpyright"].state == status["typescript"].state == "running"
    assert note == RESTRICTED_NOTE


async def test_trusted_runs_the_workspace_typescript_and_interpreter(tmp_path: Path) -> None:
    hostile = Hostile(tmp_path / "ws")
    with trio.fail_after(90):
        async with serving(trust_pool(hostile.root, Trust(True))) as pool:
            errors = await read_edit_diagnose(pool, hostile)
            status = {s.name: s for s in pool.status()}
            note = pool.restricted_note()
    assert hostile.markers() == ["workspace-typescript-ran", "workspace-python-ran"]
    assert errors == [("app.py", 1), ("app.ts", 1)]
    assert not status["basedpyright"].restricted
    assert not status["typescript"].restricted
    assert note == ""


async def test_trusting_restarts_the_restricted_servers_unrestricted(tmp_path: Path) -> None:
    hostile = Hostile(tmp_path / "ws")
    trust = Trust(False)
    with trio.fail_after(120):
        async with serving(trust_pool(hostile.root, trust)) as pool:
            await read_edit_diagnose(pool, hostile)
            before = hostile.markers()
            trust.trusted = True
            pool.trust_changed()
            errors = await read_edit_diagnose(pool, hostile)
            status = {s.name: s for s in pool.status()}
    assert before == []
    assert hostile.markers() == ["workspace-typescript-ran", "workspace-python-ran"]
    assert errors == [("app.py", 1), ("app.ts", 1)]
    assert not status["basedpyright"].restricted
    assert not status["typescript"].restricted


def test_without_a_typescript_beside_the_server_the_global_one_is_used(tmp_path: Path) -> None:
    """A server installed on its own: the TypeScript whose `tsserver` is on PATH is the
    user's; with none, typescript-language-server would fall back on the workspace's
    TypeScript, so it does not run at all."""
    lonely = tmp_path / "elsewhere" / "bin" / "typescript-language-server"
    lonely.parent.mkdir(parents=True)
    lonely.write_text("#!/bin/sh\n")
    lonely.chmod(0o755)
    hostile = Hostile(tmp_path / "ws")
    spec = spec_named("typescript")
    form = restricted_form(spec, [str(lonely), "--stdio"], hostile.root, path="")
    assert isinstance(form, str)
    assert "no TypeScript of your own" in form
    # A global install, as npm lays it out: prefix/bin/tsserver -> ../lib/node_modules/...
    package = tmp_path / "prefix" / "lib" / "node_modules" / "typescript"
    (package / "bin").mkdir(parents=True)
    (package / "lib").mkdir()
    (package / "lib" / "tsserver.js").write_text("")
    (package / "bin" / "tsserver").write_text("#!/bin/sh\n")
    (package / "bin" / "tsserver").chmod(0o755)
    (tmp_path / "prefix" / "bin").mkdir()
    (tmp_path / "prefix" / "bin" / "tsserver").symlink_to(package / "bin" / "tsserver")
    form = restricted_form(
        spec, [str(lonely), "--stdio"], hostile.root, path=str(tmp_path / "prefix" / "bin")
    )
    assert isinstance(form, ServerSpec)
    assert form.initialization_options == {
        "tsserver": {"path": str(package / "lib" / "tsserver.js")},
        "disableAutomaticTypingAcquisition": True,
    }
    # The workspace's own tsserver on PATH is not the user's.
    own = hostile.root / "node_modules" / "typescript" / "bin" / "tsserver"
    own.parent.mkdir()
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    (hostile.root / "node_modules" / ".bin").mkdir()
    (hostile.root / "node_modules" / ".bin" / "tsserver").symlink_to(own)
    form = restricted_form(
        spec, [str(lonely), "--stdio"], hostile.root, path=str(hostile.root / "node_modules/.bin")
    )
    assert isinstance(form, str)


def test_a_server_program_inside_the_workspace_does_not_run_untrusted(tmp_path: Path) -> None:
    hostile = Hostile(tmp_path / "ws")
    inside = hostile.root / "node_modules" / ".bin" / "basedpyright-langserver"
    inside.parent.mkdir(parents=True)
    inside.write_text("#!/bin/sh\n")
    form = restricted_form(spec_named("basedpyright"), [str(inside), "--stdio"], hostile.root)
    assert isinstance(form, str)
    assert "lives in the workspace" in form
