"""Reaching a file inside the workspace exactly where the containment check found it.

The tools check a path once (`resolve_in_workspace`: symlinks resolved, the result inside the
workspace), then use it. Between the two a command can swap a folder on that path for a
symlink to somewhere else; opening the checked path by name would follow it, and the daemon,
which is not sandboxed, would read or write outside the workspace.

Rules:
- The checked path is already resolved, so it holds no symlink. Its folder is opened from the
  workspace root's descriptor one component at a time with `O_NOFOLLOW | O_DIRECTORY`: a
  component that is now a symlink (or no longer a folder) fails with ELOOP or ENOTDIR instead
  of being followed. Missing folders are created (`mkdir` relative to their parent's
  descriptor) only when asked.
- The file itself is then opened, created, renamed or removed relative to that folder's
  descriptor, never by its full name, and never through a symlink (`O_NOFOLLOW`).
- A path that is not inside the root raises `OutsideWorkspace` before anything is opened.
- A folder is listed from its descriptor (`os.scandir(fd)`), and a walk opens each subfolder
  relative to its parent's descriptor, again with `O_NOFOLLOW | O_DIRECTORY`: a folder swapped
  for a symlink during a listing or a walk is skipped, never entered.

Errors: OSError, with `OutsideWorkspace` (EXDEV) for a path outside the root and
`FileTooLarge` (EFBIG) for a file past a reader's limit.
"""

import contextlib
import errno
import os
import stat
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused once open.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OutsideWorkspace(OSError):
    """A path given to this module is not inside the root it was given with."""


class FileTooLarge(OSError):
    """A file is larger than the reader's limit; `size` is its size in bytes."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is {size:,} bytes, over {limit:,}")
        self.size = size


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    if path != root and root not in path.parents:
        raise OutsideWorkspace(errno.EXDEV, f"{path} is not inside {root}")
    parts = path.relative_to(root).parts
    if any(part in ("..", ".") for part in parts):
        raise OutsideWorkspace(errno.EXDEV, f"{path} is not a resolved path")
    return parts


@contextlib.contextmanager
def open_folder(root: Path, folder: Path, *, create: bool = False) -> Generator[int]:
    """A descriptor of `folder` (a resolved path inside the resolved `root`, or `root`
    itself) reached from `root` without following any symlink; closed on exit. With
    `create`, missing folders are made (mode 0o777 less the umask, as `mkdir -p` does).
    Raises OSError: FileNotFoundError for a missing folder, ELOOP or ENOTDIR for a component
    that is a symlink or not a folder, OutsideWorkspace for a folder outside `root`."""
    fd = folder_descriptor(root, folder, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def folder_descriptor(root: Path, folder: Path, *, create: bool = False) -> int:
    """`open_folder`'s descriptor, for a caller that closes it itself (a walk)."""
    parts = _parts(root, folder)
    fd = os.open(root, _FOLDER_FLAGS)
    try:
        for part in parts:
            try:
                child = open_subfolder(fd, part)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = open_subfolder(fd, part)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_subfolder(folder: int, name: str) -> int:
    """A descriptor of the folder `name` inside the folder open as `folder`, never through a
    symlink. Raises OSError: ELOOP for a symlink, ENOTDIR for anything else not a folder."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except NotADirectoryError:
        # Linux says ENOTDIR for a symlink opened with O_NOFOLLOW | O_DIRECTORY; a symlink
        # is told apart (ELOOP) so that callers can say the path changed under them.
        if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, f"{name} is a symlink; it was not followed") from None
        raise


def read_beneath(
    root: Path, path: Path, *, limit: int | None = None
) -> tuple[bytes, os.stat_result]:
    """The content of the regular file `path` (resolved, inside `root`) and its status as
    opened, reached as `open_folder` reaches folders and opened without following a symlink.
    Raises FileNotFoundError, IsADirectoryError, OSError(ELOOP) for a symlink, OSError(EINVAL)
    for anything else that is not a regular file, and FileTooLarge past `limit` bytes
    (the status is checked before anything is read)."""
    with open_beneath(root, path, limit=limit) as (file, status):
        return file.read(), status


@contextlib.contextmanager
def open_beneath(
    root: Path, path: Path, *, limit: int | None = None
) -> Generator[tuple[BinaryIO, os.stat_result]]:
    """The regular file `path` open for reading (closed on exit) and its status, reached and
    checked as `read_beneath` does, for a reader that takes only part of it."""
    if path == root:
        raise IsADirectoryError(errno.EISDIR, f"{path} is a directory")
    with open_folder(root, path.parent) as folder:
        fd, status = _open_regular(folder, path.name, path, limit)
    with os.fdopen(fd, "rb") as file:
        yield file, status


def read_at(folder: int, name: str, *, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """`read_beneath` for the file `name` of the folder open as `folder` (a walk's)."""
    fd, status = _open_regular(folder, name, name, limit)
    with os.fdopen(fd, "rb") as file:
        return file.read(), status


def _open_regular(
    folder: int, name: str, shown: object, limit: int | None
) -> tuple[int, os.stat_result]:
    fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{shown} is a directory")
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, f"{shown} is not a regular file")
        if limit is not None and status.st_size > limit:
            raise FileTooLarge(Path(str(shown)), status.st_size, limit)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def list_beneath(root: Path, folder: Path) -> list[tuple[str, bool]]:
    """The entries of `folder` (reached as `open_folder` reaches it), unsorted, as (name,
    whether it is a folder); a symlink counts as what it points to (it is only named, not
    followed), an entry whose kind cannot be read as a file. Raises OSError as `open_folder`
    does, or when the folder cannot be listed."""
    listed: list[tuple[str, bool]] = []
    with open_folder(root, folder) as fd, os.scandir(fd) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            listed.append((entry.name, is_dir))
    return listed


def read_if_present(root: Path, path: Path) -> bytes | None:
    """`read_beneath`'s content, or None when there is no such file."""
    try:
        return read_beneath(root, path)[0]
    except FileNotFoundError:
        return None


def status_beneath(root: Path, path: Path) -> os.stat_result | None:
    """The status of `path` itself (a symlink is not followed), or None when it or its folder
    does not exist."""
    try:
        with open_folder(root, path.parent) as folder:
            return os.stat(path.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def unlink_beneath(root: Path, path: Path) -> None:
    """Remove the file `path` (a symlink there is removed, not followed). Raises OSError."""
    with open_folder(root, path.parent) as folder:
        os.unlink(path.name, dir_fd=folder)
