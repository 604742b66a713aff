"""Sessions in their own git worktree: running git safely (`git.py`) and the worktrees a
workspace's sessions work in (`worktree.py`)."""
