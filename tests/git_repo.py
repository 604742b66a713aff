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
