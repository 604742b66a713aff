"""Writing a user's file so that it is never left half-written.

`atomic_write` writes the new content to a temporary file in the same folder, gives it the old
file's permission bits (and owner, where the daemon may set it), flushes it to disk and renames
it over the file with `os.replace`, which is atomic: whatever fails (a full disk, an error, a
crash), the file holds either all of its old content or all of the new. On an error the
temporary file is removed; only a crash between its creation and the rename can leave one
behind (a hidden `.<name>.<random>.tmp` beside the file).

A symlink is followed: the file it resolves to is written and the link stays a link (callers
check that the resolved file is one they may write). A file without write permission for the
daemon is refused, as writing it in place would be. The rename gives the file a new inode, so
a hard link elsewhere keeps the old content.

Every place that writes a user's file goes through here: edit_file and write_file, and undo.
"""

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

Writer = Callable[[int, bytes], None]
"""Writes all of `data` to the open file descriptor (an injection point for tests)."""

_MAX_NAME_KEPT = 200  # of the file's name in the temporary's, which must stay under 255 bytes


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, *, write: Writer = write_all) -> None:
    """Replace the content of `path` (following symlinks) with `data`, or create it, in one
    atomic step. Raises OSError (PermissionError for a file the daemon may not write) with the
    file untouched and no temporary file left. The folder must exist.

    Blocking: call it from a worker thread."""
    target = Path(os.path.realpath(path))
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None and not os.access(target, os.W_OK):
        raise PermissionError(f"{target} is read-only")
    fd, temporary = _create_temporary(target)
    try:
        try:
            write(fd, data)
            if old is not None:
                _keep_owner_and_mode(fd, old)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)


def _create_temporary(target: Path) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        name = f".{target.name[:_MAX_NAME_KEPT]}.{secrets.token_hex(4)}.tmp"
        temporary = target.with_name(name)
        try:
            # 0o666 less the umask: a new file gets the mode `open(path, "w")` would give it.
            return os.open(temporary, flags, 0o666), temporary
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


def _sync_folder(folder: Path) -> None:
    # Makes the rename itself durable; not every filesystem can sync a folder.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
