"""What every tool is: a params Struct (its field docs become the schema the model sees), a
description stating its limits, a read-only flag for the scheduler, and an async `run`.

A tool reports a problem the model can act on by raising `ToolFailure`; the message goes back
to the model as the call's result. Any other exception is a bug and is reported as one.
"""

from pathlib import Path
from typing import ClassVar, Protocol

import msgspec


class ToolFailure(Exception):
    """A failed call, explained for the model."""


class ToolParams(msgspec.Struct, frozen=True, kw_only=True):
    pass


class ToolContext:
    """What a running tool may touch. Tests build one over a temporary workspace."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace


class Tool(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    read_only: ClassVar[bool]
    params: ClassVar[type[ToolParams]]

    async def run(self, params: ToolParams, ctx: ToolContext) -> str: ...


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """Resolve `path` (relative to the workspace, or absolute) with symlinks followed; refuse
    anything that ends up outside the workspace."""
    if "\x00" in path:
        raise ToolFailure("The path contains a NUL byte.")
    root = workspace.resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise ToolFailure(
            f"{path!r} is outside the workspace ({root}); only paths inside it can be used."
        )
    return target


def display_path(workspace: Path, path: Path) -> str:
    try:
        return str(path.relative_to(workspace.resolve())) or "."
    except ValueError:
        return str(path)
