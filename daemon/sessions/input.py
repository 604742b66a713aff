"""What goes with a user's message: the repository's instructions, the editor's state, the
files the message mentions and the texts the client attached, read when the message is sent
(so a queued message keeps what was true then).

Reading touches files only, in worker threads; what joins the history, and when the
instructions count as sent, is the turn's business (`tether.daemon.sessions.loaded`).
"""

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import trio

from tether.daemon.beneath import FileTooLarge, read_beneath
from tether.daemon.context.images import ImageProblem, PreparedImage, prepare_image
from tether.daemon.context.instructions import load_project_instructions
from tether.daemon.context.mentions import image_file, render_context
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import PermissionMode
from tether.protocol.images import MAX_IMAGE_BYTES, MAX_IMAGES, MAX_IMAGES_BYTES, describe_over
from tether.protocol.methods import Attachment, EditorContext, ImageInput


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """What goes with a user's message, read when it is sent (`read_turn_input`)."""

    instructions: str = ""
    """The repository's instructions as read then ("" when there are none)."""
    context: str = ""
    """Editor state and mentioned files, rendered for the model."""
    problems: Sequence[str] = ()
    """Paths that could not be attached, and why, for the client that sent them."""
    files: Sequence[str] = ()
    """Workspace-relative paths it names (open in the editor, mentioned): files in play for
    the skills catalog."""
    images: Sequence[PreparedImage] = ()
    """Images sent with it (the client's, then mentioned image files), ready for the model."""


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A user's message to a session, as `turn/start` brings it."""

    text: str
    by: str = ""
    """The client that sent it (empty: unnamed)."""
    permission_mode: PermissionMode | None = None
    """The session's permission mode from now on (None: unchanged)."""
    model: str | None = None
    """The session's model from now on (None: unchanged)."""
    turn_input: TurnInput | None = None
    """What goes with it (None: nothing)."""
    client_env: Mapping[str, str] | None = None
    """The sending client's provider variables (None: it sent none)."""
    shell_env: Mapping[str, str] | None = None
    """The sending client's environment, without secret-looking variables, that a turn this
    starts runs its commands and hooks in (None: the daemon's)."""


async def read_turn_input(
    workspace: Path,
    *,
    editor: EditorContext | None,
    mentions: Sequence[str],
    attachments: Sequence[Attachment] = (),
    images: Sequence[ImageInput] = (),
    dialect: str = "openai",
) -> TurnInput:
    """Read the repository's instructions, the editor state and the mentioned files, and
    render them with the attached texts. The client's `images` and the mentioned image files
    are made fit for `dialect` (`tether.daemon.context.images`); a client's image that is
    refused is an `INVALID_PARAMS` error naming it, a mentioned one a problem."""
    instructions = await trio.to_thread.run_sync(load_project_instructions, workspace)
    block = ""
    problems: Sequence[str] = ()
    prepared: list[PreparedImage] = []
    if images or mentions:
        prepared, mentions, problems = await trio.to_thread.run_sync(
            _read_images, workspace, images, mentions, dialect
        )
    if editor is not None or mentions or attachments:
        cursor = (editor.cursor.line, editor.cursor.column) if editor and editor.cursor else None
        block, found = await trio.to_thread.run_sync(
            lambda: render_context(
                workspace,
                open_file=editor.open_file if editor else None,
                cursor=cursor,
                selection=editor.selection if editor else None,
                open_files=editor.open_files if editor else (),
                mentions=mentions,
                attachments=[(a.name, a.text) for a in attachments],
            )
        )
        problems = [*problems, *found]
    named = [*mentions]
    if editor is not None:
        named += [*([editor.open_file] if editor.open_file else []), *editor.open_files]
    files = tuple(dict.fromkeys(p for p in (_relative(workspace, n) for n in named) if p))
    return TurnInput(
        instructions=instructions, context=block, problems=problems, files=files, images=prepared
    )


def _read_images(
    workspace: Path, images: Sequence[ImageInput], mentions: Sequence[str], dialect: str
) -> tuple[list[PreparedImage], list[str], list[str]]:
    """(the images prepared, the mentions that are not image files, problems)."""
    if len(images) > MAX_IMAGES:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params for turn/start: {len(images)} images, over the {MAX_IMAGES} a"
            " message may carry",
        )
    total = sum(len(image.data) for image in images)
    if total > MAX_IMAGES_BYTES:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params for turn/start: the images take"
            f" {describe_over(total, MAX_IMAGES_BYTES)} a message may carry",
        )
    prepared: list[PreparedImage] = []
    for index, image in enumerate(images):
        try:
            prepared.append(prepare_image(image.name or f"image {index + 1}", image.data, dialect))
        except ImageProblem as exc:
            raise RpcError(
                ErrorCode.INVALID_PARAMS, f"invalid params for turn/start: images[{index}]: {exc}"
            ) from None
    others: list[str] = []
    problems: list[str] = []
    root = workspace.resolve()
    for mention in mentions:
        found = image_file(workspace, mention)
        if found is None:
            others.append(mention)
            continue
        display, path = found
        try:
            if len(prepared) >= MAX_IMAGES:
                raise ImageProblem(f"{display}: over the {MAX_IMAGES} images a message may carry")
            try:
                # Read where the mention's check found it, never through a symlink.
                data, _ = read_beneath(root, path, limit=MAX_IMAGE_BYTES)
            except FileTooLarge as exc:
                raise ImageProblem(
                    f"{display}: {describe_over(exc.size, MAX_IMAGE_BYTES)} an image may have"
                ) from None
            prepared.append(prepare_image(display, data, dialect))
        except ImageProblem as exc:
            problems.append(f"{exc}; not attached")
        except OSError as exc:
            problems.append(f"{mention}: unreadable ({exc.strerror or exc}); not attached")
    return prepared, others, problems


def _relative(workspace: Path, path: str) -> str:
    """`path` as a normalised workspace-relative POSIX path ("" when it is outside)."""
    joined = os.path.normpath(os.path.join(workspace, path.removeprefix("@")))
    relative = os.path.relpath(joined, os.path.normpath(workspace))
    if relative == "." or relative.startswith(".."):
        return ""
    return Path(relative).as_posix()
