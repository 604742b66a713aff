"""The bytes of the images sent in a session's messages, kept beside the workspace's database.

Events carry only an image's description (`ImageRef`); the bytes are files named by their
SHA-256 under `images/<session id>/` next to the store's database, so a session loaded again
(after a restart too) sends the model the same images. The folders are 0700 and the files 0600
like the database, written atomically (a temporary file, then a rename) so a crash leaves no
half image. Deleting a session deletes its folder. Every method does file I/O: call them from
a worker thread.

A tool's images come the same way (`ToolImages`, the `ImageKeeper` of a turn's tools): made fit
for the model as a message's are, then kept here before the call's result is recorded.
"""

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import trio

from tether.daemon.config.paths import private_dir
from tether.daemon.context.images import ImageProblem, prepare_image
from tether.daemon.tools.images import ToolImage


class ImageStore:
    """The image files of a workspace's sessions, under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, session_id: str) -> Path:
        if not session_id or "/" in session_id or session_id.startswith("."):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.root / session_id

    def save(self, session_id: str, sha256: str, data: bytes) -> None:
        """Keep `data` (whose digest is `sha256`) for the session; a no-op when it is kept."""
        folder = self._folder(session_id)
        path = folder / sha256
        if path.exists():
            return
        private_dir(folder)
        temporary = folder / f".{sha256}.{os.getpid()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise

    def load(self, session_id: str, digests: Iterable[str]) -> dict[str, bytes]:
        """The kept bytes of the images with these digests (those missing are left out)."""
        folder = self._folder(session_id)
        found: dict[str, bytes] = {}
        for digest in dict.fromkeys(digests):
            with contextlib.suppress(OSError):
                found[digest] = (folder / digest).read_bytes()
        return found

    def copy_session(self, source_id: str, target_id: str, digests: Iterable[str]) -> None:
        """Give `target_id` (a fork) the images of `source_id` with these digests (those the
        fork's messages carry; any the source no longer has are left out): hard links where
        the file system allows (the bytes are never rewritten, so sharing them is safe and
        deleting one session leaves the other's), copies elsewhere."""
        source, target = self._folder(source_id), self._folder(target_id)
        wanted = [digest for digest in dict.fromkeys(digests) if (source / digest).is_file()]
        if not wanted:
            return
        private_dir(target)
        for digest in wanted:
            try:
                os.link(source / digest, target / digest)
            except FileExistsError:
                continue
            except OSError:
                shutil.copyfile(source / digest, target / digest)
                os.chmod(target / digest, 0o600)

    def delete_session(self, session_id: str) -> None:
        """Forget every image of the session."""
        shutil.rmtree(self._folder(session_id), ignore_errors=True)


class ToolImages:
    """The `ImageKeeper` a turn's tools get: an image checked and downscaled for the model
    the turn calls (`dialect()`: its wire dialect, read when the image comes), then kept in
    `store` for the session."""

    def __init__(self, store: ImageStore, session_id: str, dialect: Callable[[], str]) -> None:
        self.store = store
        self.session_id = session_id
        self.dialect = dialect

    async def keep(self, name: str, data: bytes) -> ToolImage | str:
        try:
            prepared = await trio.to_thread.run_sync(prepare_image, name, data, self.dialect())
        except ImageProblem as exc:
            return str(exc)
        await trio.to_thread.run_sync(
            self.store.save, self.session_id, prepared.ref.sha256, prepared.data
        )
        return ToolImage(ref=prepared.ref, data=prepared.data)
