"""`tether run --worktree`, `diff`, `merge` and `worktrees` as a person types them, against
the real daemon, real git and the scripted model; the session's sandboxed commands write in
its worktree (and commit there) but cannot touch the workspace's checkout."""

import json
import shlex
from pathlib import Path

import pytest

from tests.git_repo import git, make_repo
from tests.support import Home, cli, require_program
from tether.testing import ModelServer


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", "greeting = 'hello'\n")


def command(text: str) -> dict[str, object]:
    return {
        "tool_calls": [
            {"name": "run_command", "arguments": {"command": text, "description": "work"}}
        ]
    }


def test_a_worktree_run_is_reviewed_merged_and_pruned_from_the_cli(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    bwrap = require_program("bwrap", "worktree commands run sandboxed")
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'sandbox = "bwrap"\nsandbox_bwrap = "{bwrap}"\n')
    escape = repo / "escape.txt"
    model_server.set_script(
        {
            "steps": [
                command(
                    "echo made > made.txt && git add made.txt"
                    " && git -c user.name=a -c user.email=a@a commit -qm made"
                ),
                command(f"echo mine >> app.py; touch {shlex.quote(str(escape))} || echo refused"),
                {"text": "done"},
            ]
        }
    )
    ran = cli(
        home, "run", "--worktree", "Add made", "--permission-mode", "auto", "-w", str(repo), "go"
    )
    assert ran.returncode == 0, ran.stderr
    assert not escape.exists()
    assert not (repo / "made.txt").exists()

    listed = cli(home, "worktrees", "--json", "-w", str(repo))
    [entry] = json.loads(listed.stdout)
    root = Path(entry["worktree"]["root"])
    assert entry["merged"] is False
    assert entry["worktree"]["branch"].startswith("tether/add-made-")
    assert (root / "made.txt").read_text() == "made\n"
    assert git(root, "log", "-1", "--format=%s").strip() == "made"

    stat = cli(home, "diff", "--stat", "-w", str(repo))
    assert stat.returncode == 0, stat.stderr
    assert "+1 -0  made.txt" in stat.stdout
    assert "+1 -0  app.py" in stat.stdout
    patch = cli(home, "diff", "-w", str(repo)).stdout
    assert "+mine" in patch

    merged = cli(home, "merge", "--squash", "-w", str(repo))
    assert merged.returncode == 0, merged.stderr
    assert "app.py" in merged.stdout
    assert (repo / "made.txt").read_text() == "made\n"
    assert (repo / "app.py").read_text() == "greeting = 'hello'\nmine\n"
    assert git(repo, "status", "--porcelain") == ""

    assert "merged" in cli(home, "worktrees", "-w", str(repo)).stdout
    pruned = cli(home, "worktrees", "--prune", "-w", str(repo))
    assert f"removed the worktree of session {entry['sessionId']}" in pruned.stdout
    assert not root.exists()
    cli(home, "daemon", "stop", "-w", str(repo))


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--from", "HEAD"], "--from goes with --worktree"),
        (["--worktree", "-c"], "--worktree makes a new session"),
    ],
    ids=["from-alone", "worktree-with-continue"],
)
def test_a_usage_error_of_run_starts_no_daemon(
    home: Home, repo: Path, options: list[str], said: str
) -> None:
    done = cli(home, "run", *options, "-w", str(repo), "go")
    assert done.returncode == 2
    assert said in done.stderr
    # A daemon started for the command would have had its stderr file made before it ran.
    assert not home.stderr_path(repo).exists()
    assert home.read_discovery(repo) is None


def test_deleting_a_session_with_unmerged_changes_needs_force(
    home: Home, repo: Path, model_server: ModelServer
) -> None:
    write = {"name": "write_file", "arguments": {"path": "new.py", "content": "n = 1\n"}}
    model_server.set_script({"steps": [{"tool_calls": [write]}, {"text": "done"}]})
    ran = cli(home, "run", "--worktree", "--permission-mode", "auto", "-w", str(repo), "go")
    assert ran.returncode == 0, ran.stderr
    [entry] = json.loads(cli(home, "worktrees", "--json", "-w", str(repo)).stdout)
    root = Path(entry["worktree"]["root"])
    assert (root / "new.py").exists()
    assert entry["worktree"]["branch"] == f"tether/{entry['sessionId']}"

    refused = cli(home, "sessions", "--delete", entry["sessionId"], "-w", str(repo))
    assert refused.returncode != 0
    assert "not merged" in refused.stderr
    assert root.exists()
    forced = cli(home, "sessions", "--delete", entry["sessionId"], "--force", "-w", str(repo))
    assert forced.returncode == 0, forced.stderr
    assert not root.exists()
    cli(home, "daemon", "stop", "-w", str(repo))
