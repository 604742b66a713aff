"""Real git repositories for the worktree tests."""

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Plain git in `repo` (not tether's guarded git), as a user would run it."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def make_repo(repo: Path, content: str) -> Path:
    """A repository at `repo` on branch `main` with one commit holding `app.py`."""
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "app.py").write_text(content)
    git(repo, "add", "app.py")
    git(repo, "commit", "--quiet", "-m", "first")
    return repo


HOSTILE_HOOKS = (
    "post-checkout",
    "pre-commit",
    "commit-msg",
    "post-commit",
    "post-merge",
    "pre-merge-commit",
    "prepare-commit-msg",
    "reference-transaction",
    "post-index-change",
)


def hostile(repo: Path, marker: Path) -> None:
    """Hooks, an fsmonitor and an ssh command that each leave a marker file when run."""
    script = f"#!/bin/sh\ntouch {marker}/$(basename $0)\n"
    hooks = repo / ".git" / "hooks"
    for name in HOSTILE_HOOKS:
        (hooks / name).write_text(script)
        (hooks / name).chmod(0o755)
    (repo / "fsmonitor.sh").write_text(f"#!/bin/sh\ntouch {marker}/fsmonitor\n")
    (repo / "fsmonitor.sh").chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(repo / "fsmonitor.sh"))
    git(repo, "config", "core.sshCommand", f"touch {marker}/ssh")
    git(repo, "config", "core.pager", f"touch {marker}/pager")
    git(repo, "config", "commit.gpgSign", "true")
