"""Which workspace files an MCP server's definition names (what its approval covers too), and
how a change is told."""

import hashlib
from pathlib import Path

from tether.daemon.mcp.named_files import named_files, what_changed


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_command_arguments_and_environment_name_workspace_files(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "bin").mkdir(parents=True)
    (workspace / "tools").mkdir()
    (workspace / "bin" / "serve").write_text("serve")
    (workspace / "tools" / "server.js").write_text("server")
    (workspace / "tools" / "config.json").write_text("config")
    (workspace / "tools" / "hook.js").write_text("hook")
    outside = tmp_path / "elsewhere.js"
    outside.write_text("not the repository's")
    (workspace / "tools" / "escape.js").symlink_to(outside)
    # The command, like the arguments, is found from the working folder: tools/bin/serve is
    # no file, so it names none.
    found = named_files(
        workspace,
        "./bin/serve",
        ["server.js", "--config=config.json", "--verbose", str(outside), "escape.js", "missing.js"],
        "tools",
        {"NODE_OPTIONS": "--require ./hook.js", "MODE": "fast"},
    )
    assert found == {
        "tools/server.js": sha("server"),
        "tools/config.json": sha("config"),
        "tools/hook.js": sha("hook"),
    }
    assert named_files(workspace, "node", ["server.js"], "") == {}
    assert named_files(workspace, "bin/serve", [], "") == {"bin/serve": sha("serve")}


def test_what_changed_names_each_file() -> None:
    approved = {"server.js": "a", "lib.js": "b", "old.js": "c"}
    now = {"server.js": "a2", "lib.js": "b", "new.js": "d"}
    assert what_changed(approved, now) == "new.js is new, old.js is gone, server.js changed"
    assert what_changed(approved, approved) == ""
