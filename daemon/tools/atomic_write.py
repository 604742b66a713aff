"""Writing a user's file so that it is never left half-written.

`atomic_write` writes the new content to a temporary file in the same folder, gives it the old
file's permission bits (and owner, where the daemon may set it), flushes it to disk and renames
it over the file with `os.replace`, which is atomic: whatever fails (a full disk, an error, a
crash), the file holds either all of its old content or all of the new. On an error the
temporary file is removed; only a crash between its creation and the rename can leave one
behind (a hidden `.<name>.<random>.tmp` beside the file).

The file is reached from the workspace root's descriptor without following a symlink
(`tether.daemon.beneath`): the caller passes the path its containment check resolved,
and a folder on it swapped for a symlink since then makes the write fail instead of landing
where the link points. A symlink in the file's own place is refused likewise (callers resolve
a link to the file it names before checking). A file without write permission for the daemon
is refused, as writing it in place would be. The rename gives the file a new inode, so a hard
link elsewhere keeps the old content.

Every place that writes a user's file goes through here: edit_file and write_file, and undo.
"""

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from tether.daemon.beneath import open_folder

Writer = Callable[[int, bytes], None]
"""Writes all of `data` to the open file descriptor (an injection point for tests)."""

_MAX_NAME_KEPT = 200  # of the file's name in the temporary's, which must stay under 255 bytes


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(
    path: Path,
    data: bytes,
    *,
    root: Path,
    make_folders: bool = False,
    write: Writer = write_all,
) -> None:
    """Replace the content of `path` with `data`, or create it, in one atomic step. `path` is
    resolved and inside the resolved `root` (what `resolve_in_workspace` returns); with
    `make_folders` its missing folders are created. Raises OSError (PermissionError for a file
    the daemon may not write, ELOOP or ENOTDIR for a symlink met on the way) with the file
    untouched and no temporary file left.

    Blocking: call it from a worker thread."""
    with open_folder(root, path.parent, create=make_folders) as folder:
        _replace(folder, path, data, write)


def _replace(folder: int, path: Path, data: bytes, write: Writer) -> None:
    name = path.name
    try:
        old = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISLNK(old.st_mode):
        raise OSError(errno.ELOOP, f"{path} is a symlink; it was not followed")
    if old is not None and not os.access(name, os.W_OK, dir_fd=folder):
        raise PermissionError(f"{path} is read-only")
    fd, temporary = _create_temporary(folder, name)
    try:
        try:
            write(fd, data)
            if old is not None:
                _keep_owner_and_mode(fd, old)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise
    with contextlib.suppress(OSError):  # makes the rename durable; not every filesystem can
        os.fsync(folder)


def _create_temporary(folder: int, name: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        temporary = f".{name[:_MAX_NAME_KEPT]}.{secrets.token_hex(4)}.tmp"
        try:
            # 0o666 less the umask: a new file gets the mode `open(path, "w")` would give it.
            return os.open(temporary, flags, 0o666, dir_fd=folder), temporary
        except FileExistsError:
            continue


def _keep_owner_and_mode(fd: int, old: os.stat_result) -> None:
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) != (old.st_uid, old.st_gid):
        # Only a privileged daemon can give the file back to its owner; otherwise the file
        # becomes the daemon user's, as any editor's save-by-rename does.
        with contextlib.suppress(PermissionError):
            os.fchown(fd, old.st_uid, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode))  # after chown, which clears set-id bits
