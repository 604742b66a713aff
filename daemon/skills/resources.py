"""A file bundled with a skill: resolved inside the skill's folder, never outside it.

The model names a resource relative to the skill's folder (as the skill's instructions do).
An absolute path, a `~` path or any `..` segment is refused as given; the rest is resolved
with symlinks followed and must still lie inside the folder (itself resolved), so a link in a
skill cannot lead the agent to a file elsewhere.
"""

import contextlib
import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from tether.daemon.beneath import open_folder

BUNDLED_LISTED = 40
"""Bundled files named after a skill's instructions; the rest are counted."""
_WALK_LIMIT = 2000


class ResourceRefused(Exception):
    """Why a resource cannot be read, for the model."""


def resolve_resource(folder: Path, resource: str) -> Path:
    """The file `resource` names inside the skill folder `folder`. Raises ResourceRefused for a
    path that is empty, absolute, uses `..`, or resolves outside the folder."""
    text = resource.strip()
    if not text:
        raise ResourceRefused("The resource is empty: name a file of the skill's folder.")
    if "\x00" in text:
        raise ResourceRefused("The resource contains a NUL byte.")
    posix = PurePosixPath(text.replace("\\", "/"))
    if posix.is_absolute() or PureWindowsPath(text).drive or text.startswith("~"):
        raise ResourceRefused(
            f"{resource!r} is an absolute path; name the file relative to the skill's folder."
        )
    if ".." in posix.parts:
        raise ResourceRefused(
            f"{resource!r} goes up with `..`; only files inside the skill's folder can be read."
        )
    root = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(root / posix))
    if root not in target.parents:
        raise ResourceRefused(
            f"{resource!r} leads out of the skill's folder through a symlink; only files "
            "inside it can be read."
        )
    return target


def bundled_files(root: Path, folder: Path) -> tuple[list[str], int]:
    """Up to `BUNDLED_LISTED` files of the skill's folder `folder` (resolved, inside the
    resolved `root`) besides `SKILL.md`, as relative POSIX paths (sorted, hidden entries
    skipped, links not followed into folders), and how many more there are. The folder is
    reached beneath `root` and walked from descriptors (`os.fwalk`), so a folder swapped for
    a symlink is not entered; a folder that cannot be reached has no files."""
    found: list[str] = []
    seen = 0
    with contextlib.suppress(OSError), open_folder(root, folder) as fd:
        for top, dirs, files, _ in os.fwalk(".", dir_fd=fd):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            relative = PurePosixPath(top)
            for name in sorted(files):
                if name.startswith(".") or (name == "SKILL.md" and top == "."):
                    continue
                seen += 1
                if len(found) < BUNDLED_LISTED:
                    found.append(str(relative / name))
            if seen >= _WALK_LIMIT:
                break
    return found, seen - len(found)
