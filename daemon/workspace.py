"""How the daemon names a path to the model and the clients: relative to the workspace.

A leaf: it imports nothing of the daemon, so every part (tools, lsp, context, sessions) may
use it.
"""

from pathlib import Path


def display_path(workspace: Path, path: Path) -> str:
    """`path` relative to `workspace` (`.` for the workspace itself), or as given outside it.
    `path` is compared with the resolved workspace, as the paths the daemon works with are
    resolved."""
    try:
        return str(path.relative_to(workspace.resolve())) or "."
    except ValueError:
        return str(path)
