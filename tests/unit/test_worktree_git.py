"""Worktrees with real git: made, compared, merged and removed, and a hostile repository
whose config and hooks try to run programs running none of them."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.git_repo import git, hostile, make_repo
from tether.daemon.worktrees import worktree as wt
from tether.daemon.worktrees.git import GitError, UnsafeRepository, run_git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", "x = 1\n")


def make(repo: Path, tmp_path: Path, name: str) -> wt.Worktree:
    return wt.create(repo, tmp_path / "trees" / name, f"tether/{name}")


def test_a_worktree_is_made_on_its_branch_outside_the_repository(repo: Path, tmp_path: Path):
    tree = make(repo, tmp_path, "one")
    assert (tree.root / "app.py").read_text() == "x = 1\n"
    assert git(tree.root, "branch", "--show-current").strip() == "tether/one"
    assert tree.base == git(repo, "rev-parse", "HEAD").strip()


def test_changes_count_uncommitted_and_untracked_files_and_change_nothing(
    repo: Path, tmp_path: Path
):
    tree = make(repo, tmp_path, "one")
    (tree.root / "app.py").write_text("x = 2\n")
    (tree.root / "new.py").write_text("y = 1\nz = 2\n")
    status_before = git(tree.root, "status", "--porcelain")
    found = wt.changes(tree)
    assert {f.path: (f.added, f.removed) for f in found.files} == {
        "app.py": (1, 1),
        "new.py": (2, 0),
    }
    assert "+x = 2" in found.patch
    assert "+++ b/new.py" in found.patch
    assert git(tree.root, "status", "--porcelain") == status_before


def test_merging_two_worktrees_that_edit_the_same_line(repo: Path, tmp_path: Path):
    first, second = make(repo, tmp_path, "one"), make(repo, tmp_path, "two")
    (first.root / "app.py").write_text("x = 2\n")
    (second.root / "app.py").write_text("x = 3\n")
    assert (repo / "app.py").read_text() == "x = 1\n"
    assert not wt.is_merged(repo, first)
    done = wt.merge(repo, first, title="one")
    assert done.files == ["app.py"]
    assert (repo / "app.py").read_text() == "x = 2\n"
    assert wt.is_merged(repo, first)
    with pytest.raises(wt.MergeConflict) as conflict:
        wt.merge(repo, second, title="two")
    assert conflict.value.files == ["app.py"]
    assert (repo / "app.py").read_text() == "x = 2\n"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "HEAD").strip() == done.commit


def test_a_squash_merge_makes_one_commit_and_counts_as_merged(repo: Path, tmp_path: Path):
    tree = make(repo, tmp_path, "one")
    (tree.root / "app.py").write_text("x = 2\n")
    before = git(repo, "rev-parse", "HEAD").strip()
    wt.merge(repo, tree, title="one", squash=True)
    assert git(repo, "rev-parse", "HEAD~1").strip() == before
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    assert wt.is_merged(repo, tree)


def test_a_fork_starts_from_the_parents_worktree_as_it_is_and_leaves_it_alone(
    repo: Path, tmp_path: Path
):
    parent = make(repo, tmp_path, "parent")
    (parent.root / "app.py").write_text("x = 2\n")
    (parent.root / "new.py").write_text("n = 1\n")
    parent_head = git(parent.root, "rev-parse", "HEAD").strip()
    parent_status = git(parent.root, "status", "--porcelain")
    fork = wt.fork(repo, parent, tmp_path / "trees" / "fork", "tether/fork")
    assert (fork.root / "app.py").read_text() == "x = 2\n"
    assert (fork.root / "new.py").read_text() == "n = 1\n"
    assert git(fork.root, "branch", "--show-current").strip() == "tether/fork"
    assert git(fork.root, "status", "--porcelain") == ""
    assert fork.base == parent.base
    # The parent's branch, index and files are as they were.
    assert git(parent.root, "rev-parse", "HEAD").strip() == parent_head
    assert git(parent.root, "status", "--porcelain") == parent_status

    (fork.root / "app.py").write_text("x = 3\n")
    assert (parent.root / "app.py").read_text() == "x = 2\n"
    assert (repo / "app.py").read_text() == "x = 1\n"
    assert {f.path for f in wt.changes(fork).files} == {"app.py", "new.py"}
    assert wt.merge(repo, fork, title="fork").files == ["app.py", "new.py"]
    assert (repo / "app.py").read_text() == "x = 3\n"
    assert (repo / "new.py").read_text() == "n = 1\n"
    assert git(repo, "status", "--porcelain") == ""


def test_a_fork_of_a_worktree_with_nothing_uncommitted_starts_at_its_head(
    repo: Path, tmp_path: Path
):
    parent = make(repo, tmp_path, "parent")
    fork = wt.fork(repo, parent, tmp_path / "trees" / "fork", "tether/fork")
    assert git(fork.root, "rev-parse", "HEAD") == git(parent.root, "rev-parse", "HEAD")


def test_merge_refuses_to_overwrite_uncommitted_changes_of_the_main_checkout(
    repo: Path, tmp_path: Path
):
    tree = make(repo, tmp_path, "one")
    (tree.root / "app.py").write_text("x = 2\n")
    (repo / "app.py").write_text("mine\n")
    with pytest.raises(GitError):
        wt.merge(repo, tree, title="one")
    assert (repo / "app.py").read_text() == "mine\n"
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"


def test_a_folder_that_is_not_a_repository_is_told_so(tmp_path: Path):
    with pytest.raises(wt.NotARepository, match="not in a git repository"):
        wt.create(tmp_path, tmp_path / "tree", "tether/x")


def test_a_start_that_names_no_commit_is_told_so(repo: Path, tmp_path: Path):
    with pytest.raises(GitError, match="names no commit"):
        wt.create(repo, tmp_path / "tree", "tether/x", "nope")


def test_remove_drops_the_folder_and_branch_and_a_folder_removed_by_hand_is_pruned(
    repo: Path, tmp_path: Path
):
    kept, gone = make(repo, tmp_path, "one"), make(repo, tmp_path, "two")
    wt.remove(repo, kept)
    assert not kept.root.exists()
    assert "tether/one" not in git(repo, "branch")
    subprocess.run(["rm", "-rf", str(gone.root)], check=True)
    wt.prune_missing(repo)
    assert str(gone.root) not in git(repo, "worktree", "list")


def test_a_hostile_repository_runs_nothing_in_create_diff_merge_and_prune(
    repo: Path, tmp_path: Path
):
    marker = tmp_path / "ran"
    marker.mkdir()
    hostile(repo, marker)
    # The hostile repository does run its programs under plain git.
    subprocess.run(["git", "status"], cwd=repo, check=True, capture_output=True)
    assert (marker / "fsmonitor").exists()
    for ran in marker.iterdir():
        ran.unlink()

    tree = make(repo, tmp_path, "one")
    (tree.root / "app.py").write_text("x = 2\n")
    wt.changes(tree)
    wt.merge(repo, tree, title="one")
    other = make(repo, tmp_path, "two")
    (other.root / "b.py").write_text("b\n")
    wt.merge(repo, other, title="two", squash=True)
    (other.root / "c.py").write_text("c\n")
    wt.fork(repo, other, tmp_path / "trees" / "fork", "tether/fork")
    wt.remove(repo, tree)
    wt.prune_missing(repo)
    assert sorted(p.name for p in marker.iterdir()) == []


@pytest.mark.parametrize(
    "key",
    [
        "filter.evil.smudge",
        "filter.evil.clean",
        "filter.evil.process",
        "diff.evil.textconv",
        "merge.evil.driver",
    ],
)
def test_a_repository_whose_config_names_a_driver_program_is_refused(
    repo: Path, tmp_path: Path, key: str
):
    marker = tmp_path / "ran"
    marker.mkdir()
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil merge=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "--quiet", "-m", "attributes")
    git(repo, "config", key, f"sh -c 'touch {marker}/driver; cat'")
    with pytest.raises(UnsafeRepository, match=re.escape(key)):
        wt.create(repo, tmp_path / "tree", "tether/x")
    assert not (tmp_path / "tree").exists()
    assert list(marker.iterdir()) == []


def test_a_driver_program_in_an_included_config_file_is_refused(repo: Path, tmp_path: Path):
    (repo / "extra.cfg").write_text('[filter "evil"]\n\tsmudge = touch /tmp/x\n')
    git(repo, "config", "include.path", str(repo / "extra.cfg"))
    with pytest.raises(UnsafeRepository, match=r"filter\.evil\.smudge"):
        wt.create(repo, tmp_path / "tree", "tether/x")


def test_git_variables_of_the_environment_are_not_passed_on(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    assert run_git(repo, "rev-parse", "--show-toplevel").stdout.strip() == str(repo)


def test_branch_names_are_short_and_safe():
    assert (
        wt.branch_name("Fix the login bug! (urgent)", "s1") == "tether/fix-the-login-bug-urgent-s1"
    )
    assert wt.branch_name("", "s1") == "tether/s1"
    assert wt.branch_name("ünï ../..", "s1") == "tether/n-s1"


def test_a_worktree_whose_git_file_points_elsewhere_is_left_alone(repo: Path, tmp_path: Path):
    """Its `.git` file is in the folder its commands write: pointed at the main repository,
    a merge would move the main checkout's branch from inside the worktree."""
    tree = make(repo, tmp_path, "one")
    (tree.root / "app.py").write_text("x = 2\n")
    (tree.root / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    before = git(repo, "rev-parse", "HEAD")
    with pytest.raises(GitError, match="no longer the session's worktree"):
        wt.merge(repo, tree, title="one")
    with pytest.raises(GitError, match="no longer the session's worktree"):
        wt.changes(tree)
    assert git(repo, "rev-parse", "HEAD") == before
    assert git(repo, "status", "--porcelain") == ""


def test_a_worktree_switched_to_another_branch_is_left_alone(repo: Path, tmp_path: Path):
    tree = make(repo, tmp_path, "one")
    git(tree.root, "switch", "--quiet", "-c", "elsewhere")
    with pytest.raises(GitError, match="no longer the session's worktree"):
        wt.merge(repo, tree, title="one")


def test_a_merge_of_the_users_own_in_progress_is_left_as_it_is(repo: Path, tmp_path: Path):
    tree = make(repo, tmp_path, "one")
    (tree.root / "other.py").write_text("o\n")
    git(repo, "switch", "--quiet", "-c", "side")
    (repo / "app.py").write_text("x = 'side'\n")
    git(repo, "commit", "--quiet", "-am", "side")
    git(repo, "switch", "--quiet", "main")
    (repo / "app.py").write_text("x = 'main'\n")
    git(repo, "commit", "--quiet", "-am", "main")
    conflicted = subprocess.run(
        ["git", "merge", "side"], cwd=repo, capture_output=True, check=False
    )
    assert conflicted.returncode != 0
    with pytest.raises(GitError, match="middle of a merge"):
        wt.merge(repo, tree, title="one")
    assert (
        subprocess.run(
            ["git", "rev-parse", "-q", "--verify", "MERGE_HEAD"], cwd=repo, check=False
        ).returncode
        == 0
    )
