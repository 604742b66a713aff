"""The TypeScript server as installed today, against real installs: TypeScript 7, whose native
compiler serves LSP itself and has no `tsserver.js` (tests/lsp7: what `npm i typescript
typescript-language-server` installs now), and typescript-language-server on TypeScript 5
(tests/lsp). TypeScript 7's own server is preferred where installed; in a workspace the user
does not trust, a TypeScript 7 inside the workspace never runs, the user's own does."""

import json
import os
from pathlib import Path

import pytest
import trio

from tests.support import require_program
from tests.unit.test_lsp_pool import serving
from tests.unit.test_lsp_trust import SERVER_BIN as TS5_BIN
from tests.unit.test_lsp_trust import TS_ERROR, Trust
from tether.daemon.lsp.diagnostics import Diagnostic
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.servers import (
    BUILTIN_SERVERS,
    ServerSpec,
    resolve_command,
    restricted_form,
    trusted_command,
)

TS7_MODULES = Path(__file__).resolve().parents[1] / "lsp7" / "node_modules"
TS7_BIN = TS7_MODULES / ".bin"
TS7_TSC = TS7_MODULES / "typescript" / "bin" / "tsc"


def typescript_spec() -> ServerSpec:
    return next(spec for spec in BUILTIN_SERVERS if spec.name == "typescript")


def ts7_bin() -> Path:
    require_program(str(TS7_BIN / "tsc"), "npm ci --prefix tests/lsp7")
    return TS7_BIN


def ts5_bin() -> Path:
    require_program(str(TS5_BIN / "typescript-language-server"), "npm ci --prefix tests/lsp")
    return TS5_BIN


def project(root: Path) -> Path:
    """A strict TypeScript project at `root` with a type error in app.ts; the file."""
    root.mkdir()
    (root / "package.json").write_text('{"name": "demo", "private": true}\n')
    (root / "tsconfig.json").write_text('{"compilerOptions": {"strict": true}}\n')
    app = root / "app.ts"
    app.write_text(TS_ERROR)
    return app


def workspace_typescript_7(root: Path) -> Path:
    """A TypeScript 7 in the workspace's node_modules whose `tsc` leaves a marker when it runs
    (then hands over to the real one); the marker."""
    marker = root / "workspace-typescript-ran"
    package = root / "node_modules" / "typescript"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "typescript", "version": "7.0.2"}\n')
    tsc = package / "bin" / "tsc"
    tsc.write_text(f'#!/bin/sh\necho ran >> "{marker}"\nexec "{TS7_TSC}" "$@"\n')
    tsc.chmod(0o755)
    return marker


async def check(
    app: Path, path: list[Path], trusted: bool
) -> tuple[list[Diagnostic], list[str], bool]:
    """The errors of `app` after an edit, the command that served them, and whether it ran
    restricted, with only the `typescript` server on a PATH of `path`."""
    pool = LspPool(
        app.parent,
        builtin=["typescript"],
        search_path=os.pathsep.join(map(str, path)),
        trusted=Trust(trusted),
    )
    # A cold tsserver on a loaded machine can take many seconds to its first analysis; the
    # wait ends as soon as the errors come, so a long bound costs nothing when it is quick.
    with trio.fail_after(120):
        async with serving(pool) as serving_pool:
            found = await serving_pool.diagnostics_after_edit([app], wait=60)
            (status,) = serving_pool.status()
            (entry,) = serving_pool._entries.values()  # pyright: ignore[reportPrivateUsage]
            client = entry.client
            assert client is not None
            command = client.command
    assert status.state == "running", status.last_error
    return found, command, status.restricted


def test_a_typescript_7_tsc_is_preferred_and_an_older_one_skipped() -> None:
    ts7, ts5 = ts7_bin(), ts5_bin()
    assert resolve_command(typescript_spec(), path=f"{ts7}{os.pathsep}{ts5}") == [
        str(ts7 / "tsc"),
        "--lsp",
        "--stdio",
    ]
    # TypeScript 5's tsc has no --lsp: typescript-language-server serves it.
    assert resolve_command(typescript_spec(), path=str(ts5)) == [
        str(ts5 / "typescript-language-server"),
        "--stdio",
    ]


def test_a_language_server_installed_with_typescript_7_gives_way_to_it(tmp_path: Path) -> None:
    """Only typescript-language-server on PATH, its own TypeScript a 7: that one's server."""
    lonely = tmp_path / "bin"
    lonely.mkdir()
    (lonely / "typescript-language-server").symlink_to(TS7_BIN / "typescript-language-server")
    ts7_bin()
    assert resolve_command(typescript_spec(), path=str(lonely)) == [
        str(TS7_TSC),
        "--lsp",
        "--stdio",
    ]


async def test_npm_install_of_today_gives_typescript_diagnostics(tmp_path: Path) -> None:
    app = project(tmp_path / "ws")
    found, command, restricted = await check(app, [ts7_bin()], trusted=False)
    assert [(d.line, d.code) for d in found] == [(1, "2322")]
    assert Path(command[0]).name == "tsc"
    assert command[1:] == ["--lsp", "--stdio"]
    assert restricted


async def test_typescript_5_is_served_by_typescript_language_server(tmp_path: Path) -> None:
    app = project(tmp_path / "ws")
    found, command, _ = await check(app, [ts5_bin()], trusted=False)
    assert [(d.line, d.code) for d in found] == [(1, "2322")]
    assert Path(command[0]).name == "typescript-language-server"


async def test_untrusted_runs_the_users_typescript_7_not_the_workspaces(tmp_path: Path) -> None:
    app = project(tmp_path / "ws")
    marker = workspace_typescript_7(app.parent)
    found, command, restricted = await check(app, [ts7_bin()], trusted=False)
    assert not marker.exists()
    assert [(d.line, d.code) for d in found] == [(1, "2322")]
    assert command[0] == str(TS7_BIN / "tsc")
    assert restricted


@pytest.mark.parametrize("user", ["ts7", "ts5"])
async def test_trusted_runs_the_workspaces_typescript_7(tmp_path: Path, user: str) -> None:
    """Whatever the user has installed (TypeScript 7, or typescript-language-server on 5)."""
    app = project(tmp_path / "ws")
    marker = workspace_typescript_7(app.parent)
    found, command, restricted = await check(
        app, [ts7_bin() if user == "ts7" else ts5_bin()], trusted=True
    )
    assert marker.exists()
    assert [(d.line, d.code) for d in found] == [(1, "2322")]
    assert command[0] == str(app.parent / "node_modules" / "typescript" / "bin" / "tsc")
    assert not restricted


def test_untrusted_typescript_7_runs_without_type_acquisition(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    form = restricted_form(typescript_spec(), [str(ts7_bin() / "tsc"), "--lsp", "--stdio"], root)
    assert isinstance(form, ServerSpec)
    assert form.initialization_options == {"disableAutomaticTypeAcquisition": True}
    # A TypeScript 7 of the workspace's (on PATH, say) does not run at all.
    workspace_typescript_7(root)
    inside = root / "node_modules" / "typescript" / "bin" / "tsc"
    form = restricted_form(typescript_spec(), [str(inside), "--lsp", "--stdio"], root)
    assert isinstance(form, str)
    assert "lives in the workspace" in form


def test_the_manifest_is_what_tells(tmp_path: Path) -> None:
    """A `tsc` in no package, or in a TypeScript 5 package, does not count as a server."""
    bare = tmp_path / "bare" / "bin" / "tsc"
    bare.parent.mkdir(parents=True)
    bare.write_text("#!/bin/sh\n")
    bare.chmod(0o755)
    assert resolve_command(typescript_spec(), path=str(bare.parent)) is None
    old = tmp_path / "old" / "typescript"
    (old / "bin").mkdir(parents=True)
    (old / "package.json").write_text(json.dumps({"name": "typescript", "version": "5.9.3"}))
    (old / "bin" / "tsc").write_text("#!/bin/sh\n")
    (old / "bin" / "tsc").chmod(0o755)
    assert resolve_command(typescript_spec(), path=str(old / "bin")) is None


def test_trusted_command_finds_the_preview_and_leaves_other_servers_alone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    package = root / "node_modules" / "@typescript" / "native-preview"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(
        json.dumps({"name": "@typescript/native-preview", "version": "7.0.0-dev.20260707.2"})
    )
    (package / "bin" / "tsgo").write_text("#!/bin/sh\n")
    (package / "bin" / "tsgo").chmod(0o755)
    nested = root / "packages" / "app"
    nested.mkdir(parents=True)
    user = [str(TS7_TSC), "--lsp", "--stdio"]
    # From a project below, the nearest TypeScript up to the workspace.
    assert trusted_command(user, nested, root) == [str(package / "bin" / "tsgo"), *user[1:]]
    # A server of the user's own choosing is not swapped.
    assert trusted_command(["/opt/vtsls", "--stdio"], nested, root) == ["/opt/vtsls", "--stdio"]
    # Nothing in the project: the user's.
    assert trusted_command(user, tmp_path, tmp_path) == user
