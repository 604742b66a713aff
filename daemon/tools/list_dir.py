"""list_dir: one level of a folder."""

import errno
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolved_and_shown,
)
from tether.daemon.tools.filetree import folder_entries

MAX_ENTRIES = 300


class ListDirParams(ToolParams, frozen=True, kw_only=True):
    path: Annotated[
        str, msgspec.Meta(description="Folder, relative to the workspace root. Default '.'.")
    ] = "."


class ListDir:
    name: ClassVar[str] = "list_dir"
    description: ClassVar[str] = (
        "List one level of a folder: folders end with '/', names sorted, at most "
        f"{MAX_ENTRIES} entries. Dependency, cache and version-control folders (node_modules, "
        ".git, .venv, __pycache__, …) are counted, not listed."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = ListDirParams

    async def run(self, params: ListDirParams, ctx: ToolContext) -> str:
        path, shown = resolved_and_shown(ctx.workspace, params.path)
        return await trio.to_thread.run_sync(_list, ctx.workspace.resolve(), path, shown)


def _list(root: Path, path: Path, shown: str) -> str:
    if not path.exists():
        raise ToolFailure(f"{shown} does not exist. Use glob to find files and folders.")
    if not path.is_dir():
        raise ToolFailure(f"{shown} is a file; use read_file to read it.")
    try:
        # Listed from descriptors opened beneath the root: a folder on the path swapped for
        # a symlink since the check is refused, not followed.
        names, hidden = folder_entries(root, path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolFailure(
                f"{shown} changed while it was being listed (a symlink took the place of a "
                "folder); it was not listed."
            ) from None
        raise
    names.sort()
    lines = names[:MAX_ENTRIES]
    if len(names) > MAX_ENTRIES:
        lines.append(f"… and {len(names) - MAX_ENTRIES} more entries (not shown)")
    if hidden:
        lines.append(
            f"({len(hidden)} dependency/cache folder{'s' if len(hidden) != 1 else ''} "
            f"not listed: {', '.join(sorted(hidden))})"
        )
    if not lines:
        return f"{shown} is empty."
    return "\n".join(lines)
