"""The workspace files a server's definition names: what its approval also covers.

Approving `node server.js` must not approve whatever `server.js` becomes, so the content of
every workspace file the definition names goes into the approval with the definition. A file
is named by the command when it is a path (`./bin/serve`, `tools/server.py`) and by each
argument, or the value of a `--flag=value` argument, that is the path of a regular file, and
by each word of its environment's values (`NODE_OPTIONS="--require ./hook.js"`); relative
ones are read from the server's working folder. Only files inside the workspace
count (the rest is the user's machine, not the repository's choice), with symlinks resolved.
Folders and the modules a program imports in turn are not followed: a definition that runs
`python -m package` or `node .` is covered by its definition alone.
"""

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

MAX_FILES = 32
"""Beyond this many named files the rest are not read (a definition names a few)."""


def named_files(
    workspace: Path, command: str, args: list[str], cwd: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The workspace files the definition names, by path relative to the workspace, with the
    sha256 of their content (blocking: reads them). A file that cannot be read is left out,
    and so is anything that is not a regular file inside the workspace."""
    root = workspace.resolve()
    folder = root / cwd if cwd else root
    candidates = [command] if os.sep in command else []
    words = [word for value in (env or {}).values() for word in value.split()]
    for arg in [*args, *words]:
        if arg.startswith("-"):
            _, equals, value = arg.partition("=")
            if equals and value:
                candidates.append(value)
        elif arg:
            candidates.append(arg)
    found: dict[str, str] = {}
    for candidate in candidates:
        if len(found) >= MAX_FILES:
            break
        try:
            path = (folder / Path(candidate).expanduser()).resolve()
            if root not in path.parents or not path.is_file():
                continue
            found[str(path.relative_to(root))] = _digest(path)
        except (OSError, RuntimeError, ValueError):  # unreadable, a symlink loop, a NUL
            continue
    return found


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            digest.update(chunk)
    return digest.hexdigest()


def what_changed(approved: Mapping[str, str], now: Mapping[str, str]) -> str:
    """Which named files differ between an approval and now, as a phrase (`server.js
    changed`), or "" when none does."""
    changes: list[str] = []
    for name in sorted(approved.keys() | now.keys()):
        if approved.get(name) == now.get(name):
            continue
        if name not in now:
            changes.append(f"{name} is gone")
        elif name not in approved:
            changes.append(f"{name} is new")
        else:
            changes.append(f"{name} changed")
    return ", ".join(changes)
