"""The git worktrees sessions work in: made, compared with their base, merged back into the
main checkout, listed and removed. Blocking (git runs in a subprocess): call from a worker
thread.

Rules:
- A session's worktree is a folder of tether's own (beside the workspace's database, never in
  the repository) checked out on a branch `tether/<title>-<id>` made from the base commit.
- A session's changes are its worktree as it is now, committed or not, untracked files
  included (ignored ones not), against the base: they are read through a throwaway index, so
  reading them changes nothing in the worktree.
- A merge is tried in memory first (`git merge-tree --write-tree`): on a conflict nothing in
  the main checkout is touched and the conflicting files are named. Only then is it applied
  with `git merge` (or `--squash` and one commit), which itself refuses to overwrite changes
  of the main checkout that are not committed.
- Before tether's git reads or commits in a worktree, the worktree must still be its
  repository's, on its branch: its `.git` file is in the folder the session's commands write.
- A worktree is merged when merging it again would change nothing in the main checkout's
  branch (so a squash merge counts too).
"""

import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tether.daemon.worktrees.git import GitError, check_safe, run_git

_IDENTITY = {
    "GIT_AUTHOR_NAME": "tether",
    "GIT_AUTHOR_EMAIL": "tether@localhost",
    "GIT_COMMITTER_NAME": "tether",
    "GIT_COMMITTER_EMAIL": "tether@localhost",
}
"""Who commits when the user's git config names no one."""


class NotARepository(GitError):
    """The workspace is not in a git repository."""


class MergeConflict(GitError):
    """Merging would conflict; nothing was changed."""

    def __init__(self, files: list[str]) -> None:
        super().__init__("merging would conflict in " + ", ".join(files) + "; nothing was changed")
        self.files = files


@dataclass(frozen=True, slots=True)
class Worktree:
    root: Path
    branch: str
    base: str
    """The commit the branch was made from."""


@dataclass(frozen=True, slots=True)
class FileStat:
    path: str
    added: int
    """Lines added (0 for a binary file)."""
    removed: int
    binary: bool = False


@dataclass(frozen=True, slots=True)
class Changes:
    patch: str
    files: list[FileStat]


def repository_root(workspace: Path) -> Path:
    """The top folder of the repository holding `workspace`; `NotARepository` otherwise."""
    found = run_git(workspace, "rev-parse", "--show-toplevel", check=False)
    if found.returncode != 0:
        raise NotARepository(
            f"{workspace} is not in a git repository; worktree sessions need one (git init)"
        )
    return Path(found.stdout.strip())


def branch_name(title: str, session_id: str) -> str:
    """`tether/<short title>-<id>`: the title's words as a few lowercase ASCII words."""
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:24].strip("-")
    return f"tether/{words}-{session_id}" if words else f"tether/{session_id}"


def create(workspace: Path, folder: Path, branch: str, start: str = "HEAD") -> Worktree:
    """Check out a new worktree of the workspace's repository in `folder` (which must not
    exist) on the new branch `branch`, made from `start` (a commit, branch or tag)."""
    repo = repository_root(workspace)
    check_safe(repo)
    found = run_git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{start}^{{commit}}",
        check=False,
    )
    if found.returncode != 0:
        raise GitError(f"{start!r} names no commit of the repository")
    base = found.stdout.strip()
    folder.parent.mkdir(parents=True, exist_ok=True)
    run_git(repo, "worktree", "add", "--quiet", "-b", branch, "--", str(folder), base)
    return Worktree(root=folder, branch=branch, base=base)


def fork(workspace: Path, parent: Worktree, folder: Path, branch: str) -> Worktree:
    """A new worktree in `folder` on the new branch `branch`, starting from `parent` as it
    is now: its commits, and its uncommitted changes (untracked files too) as one commit on
    top, made through a throwaway index so the parent's branch, index and files stay as they
    are. The fork keeps the parent's base, so its diff and merge cover all its branch
    brings to the main checkout."""
    repo = repository_root(workspace)
    check_safe(repo)
    _check_is_own(parent)
    tree = _snapshot_tree(parent.root)
    head = run_git(parent.root, "rev-parse", "HEAD").stdout.strip()
    start = head
    if tree != run_git(parent.root, "rev-parse", "HEAD^{tree}").stdout.strip():
        start = run_git(
            parent.root,
            "commit-tree",
            tree,
            "-p",
            head,
            "-m",
            "tether: the changes the fork started from",
            env=_identity(parent.root),
        ).stdout.strip()
    folder.parent.mkdir(parents=True, exist_ok=True)
    run_git(repo, "worktree", "add", "--quiet", "-b", branch, "--", str(folder), start)
    return Worktree(root=folder, branch=branch, base=parent.base)


def _check_is_own(worktree: Worktree) -> None:
    """`GitError` unless `worktree.root` is still a worktree of the workspace's repository on
    its branch: its `.git` file lies in the folder the session's commands write, and pointed
    elsewhere it would have tether's git act on another repository or branch."""
    root = worktree.root
    found = run_git(root, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    common = Path(found.stdout.strip()) if found.returncode == 0 else None
    pointer = (root / ".git").read_text() if (root / ".git").is_file() else ""
    own = Path(pointer.removeprefix("gitdir: ").strip()) if pointer.startswith("gitdir: ") else None
    branch = run_git(root, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip()
    if (
        common is None
        or own is None
        or own.resolve().parent != (common / "worktrees").resolve()
        or branch != f"refs/heads/{worktree.branch}"
    ):
        raise GitError(
            f"{root} is no longer the session's worktree on {worktree.branch} (its .git file"
            " or its branch was changed); tether leaves it alone"
        )


def _snapshot_tree(root: Path) -> str:
    """The tree of the worktree as it is now (untracked files too), made through a
    throwaway index."""
    check_safe(root)
    with tempfile.TemporaryDirectory(prefix="tether-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_git(root, "read-tree", "HEAD", env=env)
        run_git(root, "add", "--all", "--", ".", env=env)
        return run_git(root, "write-tree", env=env).stdout.strip()


def changes(worktree: Worktree) -> Changes:
    """The worktree's changes against its base: a patch (`git apply` reads it, binary files
    included) and per-file line counts."""
    _check_is_own(worktree)
    tree = _snapshot_tree(worktree.root)
    common = ("--no-ext-diff", "--no-textconv", "--no-color", "-M", worktree.base, tree)
    patch = run_git(worktree.root, "diff", "--binary", *common).stdout
    numstat = run_git(worktree.root, "diff", "--numstat", "-z", *common).stdout
    return Changes(patch=patch, files=_parse_numstat(numstat))


def _parse_numstat(text: str) -> list[FileStat]:
    files: list[FileStat] = []
    fields = text.split("\0")
    index = 0
    while index < len(fields) and fields[index]:
        added, removed, path = fields[index].split("\t", 2)
        index += 1
        if not path:  # a rename: the old and new paths follow
            path = fields[index + 1]
            index += 2
        binary = added == "-"
        files.append(
            FileStat(path, 0 if binary else int(added), 0 if binary else int(removed), binary)
        )
    return files


def _identity(folder: Path) -> dict[str, str]:
    named = run_git(folder, "config", "user.email", check=False).stdout.strip()
    return {} if named else _IDENTITY


def _session_commit(worktree: Worktree, message: str) -> str | None:
    """Commit what the worktree holds beyond its branch onto its branch (the files are left
    as they are); the branch's commit, or None when the worktree changed nothing since its
    base."""
    root = worktree.root
    _check_is_own(worktree)
    tree = _snapshot_tree(root)
    head = run_git(root, "rev-parse", "HEAD").stdout.strip()
    if tree == run_git(root, "rev-parse", f"{worktree.base}^{{tree}}").stdout.strip():
        return None
    if tree == run_git(root, "rev-parse", "HEAD^{tree}").stdout.strip():
        return head
    commit = run_git(
        root, "commit-tree", tree, "-p", head, "-m", message, env=_identity(root)
    ).stdout.strip()
    run_git(root, "update-ref", "-m", "tether: the session's changes", "HEAD", commit, head)
    run_git(root, "reset", "--quiet", "--mixed")
    return commit


def _conflicts(repo: Path, commit: str) -> tuple[str, list[str]]:
    """The tree merging `commit` into the main checkout's HEAD gives, and the files that
    would conflict (none: it merges cleanly)."""
    tried = run_git(
        repo,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        "HEAD",
        commit,
        check=False,
    )
    if tried.returncode not in (0, 1):
        raise GitError(f"git merge-tree failed: {tried.stderr.strip()}")
    lines = tried.stdout.splitlines()
    tree = lines[0] if lines else ""
    files = [line for line in lines[1:] if line] if tried.returncode == 1 else []
    return tree, files


@dataclass(frozen=True, slots=True)
class MergeResult:
    commit: str
    """The main checkout's new HEAD ("" when there was nothing to merge)."""
    files: list[str]


def merge(workspace: Path, worktree: Worktree, *, title: str, squash: bool = False) -> MergeResult:
    """Bring the worktree's changes into the main checkout's current branch: a merge commit,
    or one plain commit with `squash`. `MergeConflict` (nothing changed) when they conflict
    with the branch; `GitError` when git refuses (uncommitted changes in the way, …)."""
    repo = repository_root(workspace)
    check_safe(repo)
    if _merging(repo):
        raise GitError(
            "the workspace's checkout is in the middle of a merge of its own; conclude or abort"
            " it first (nothing was changed)"
        )
    commit = _session_commit(worktree, f"tether: {title}")
    if commit is None:
        return MergeResult(commit="", files=[])
    tree, conflicted = _conflicts(repo, commit)
    if conflicted:
        raise MergeConflict(conflicted)
    if tree == run_git(repo, "rev-parse", "HEAD^{tree}").stdout.strip():
        return MergeResult(commit=run_git(repo, "rev-parse", "HEAD").stdout.strip(), files=[])
    files = changes(worktree).files
    env = _identity(repo)
    message = f"Merge tether session: {title}"
    if squash:
        done = run_git(repo, "merge", "--squash", "--quiet", commit, check=False, env=env)
        if done.returncode == 0:
            done = run_git(
                repo,
                "commit",
                "--quiet",
                "--no-verify",
                "-m",
                f"tether: {title}",
                check=False,
                env=env,
            )
    else:
        done = run_git(
            repo,
            "merge",
            "--no-ff",
            "--no-edit",
            "--quiet",
            "-m",
            message,
            commit,
            check=False,
            env=env,
        )
    if done.returncode != 0:
        # Only what this merge began is undone: a merge git refused to start left nothing.
        if _merging(repo):
            run_git(repo, "merge", "--abort", check=False)
        elif squash and (Path(_git_dir(repo)) / "SQUASH_MSG").exists():
            run_git(repo, "reset", "--quiet", "--merge", check=False)
        raise GitError(
            "git could not merge, so nothing was changed: "
            + " ".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-3:])
        )
    return MergeResult(
        commit=run_git(repo, "rev-parse", "HEAD").stdout.strip(), files=[f.path for f in files]
    )


def _git_dir(repo: Path) -> str:
    return run_git(repo, "rev-parse", "--path-format=absolute", "--git-dir").stdout.strip()


def _merging(repo: Path) -> bool:
    """Whether the checkout is in the middle of a merge (git's MERGE_HEAD exists)."""
    return (
        run_git(repo, "rev-parse", "--quiet", "--verify", "MERGE_HEAD", check=False).returncode == 0
    )


def is_merged(workspace: Path, worktree: Worktree) -> bool:
    """Whether merging the worktree would change nothing (no changes, or merged already)."""
    repo = repository_root(workspace)
    _check_is_own(worktree)
    tree = _snapshot_tree(worktree.root)
    if tree == run_git(repo, "rev-parse", f"{worktree.base}^{{tree}}").stdout.strip():
        return True
    commit = run_git(
        worktree.root,
        "commit-tree",
        tree,
        "-p",
        worktree.base,
        "-m",
        "tether: check",
        env=_identity(worktree.root),
    ).stdout.strip()
    merged_tree, conflicted = _conflicts(repo, commit)
    return (
        not conflicted and merged_tree == run_git(repo, "rev-parse", "HEAD^{tree}").stdout.strip()
    )


def remove(workspace: Path, worktree: Worktree) -> None:
    """Remove the worktree's folder and its branch (what it held is lost)."""
    repo = repository_root(workspace)
    if worktree.root.exists():
        done = run_git(
            repo, "worktree", "remove", "--force", "--force", str(worktree.root), check=False
        )
        if done.returncode != 0 and worktree.root.exists():
            shutil.rmtree(worktree.root)
    run_git(repo, "worktree", "prune")
    run_git(repo, "branch", "--quiet", "-D", "--", worktree.branch, check=False)


def prune_missing(workspace: Path) -> None:
    """Let git forget worktrees whose folders were removed by hand."""
    run_git(repository_root(workspace), "worktree", "prune")


def age_seconds(worktree: Worktree) -> float:
    try:
        return time.time() - worktree.root.stat().st_mtime
    except OSError:
        return 0.0


def git_folders(root: Path) -> tuple[Path, ...]:
    """What a command in the worktree `root` must write to for git to work there: its own
    folder in the repository's `.git` (its HEAD and index), the object store, the refs and
    their logs. The rest of `.git` (config, hooks) stays out: a command that could write
    them would run code the next time git runs in the main checkout. Read from the files git
    leaves (`root/.git`, `commondir`), without running git; () when they cannot be read."""
    try:
        pointer = (root / ".git").read_text()
    except OSError:
        return ()
    if not pointer.startswith("gitdir: "):
        return ()
    own = Path(pointer.removeprefix("gitdir: ").strip())
    try:
        common = (own / (own / "commondir").read_text().strip()).resolve()
    except OSError:
        return ()
    return tuple(
        folder.resolve()
        for folder in (own, common / "objects", common / "refs", common / "logs")
        if folder.is_dir()
    )
