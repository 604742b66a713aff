"""list_dir: one level of a folder."""

from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolve_in_workspace,
)

MAX_ENTRIES = 300


class ListDirParams(ToolParams, frozen=True, kw_only=True):
    path: Annotated[
        str, msgspec.Meta(description="Folder, relative to the workspace root. Default '.'.")
    ] = "."


class ListDir:
    name: ClassVar[str] = "list_dir"
    description: ClassVar[str] = (
        "List one level of a folder: folders end with '/', names sorted, at most "
        f"{MAX_ENTRIES} entries."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = ListDirParams

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        assert isinstance(params, ListDirParams)
        path = resolve_in_workspace(ctx.workspace, params.path)
        return await trio.to_thread.run_sync(_list, path, params.path)


def _list(path: Path, shown: str) -> str:
    if not path.exists():
        raise ToolFailure(f"{shown} does not exist.")
    if not path.is_dir():
        raise ToolFailure(f"{shown} is a file; use read_file to read it.")
    names = sorted((entry.name + "/" if entry.is_dir() else entry.name) for entry in path.iterdir())
    if not names:
        return f"{shown} is empty."
    shown_names = names[:MAX_ENTRIES]
    if len(names) > MAX_ENTRIES:
        shown_names.append(f"… and {len(names) - MAX_ENTRIES} more entries")
    return "\n".join(shown_names)
