"""Image files the CLI sends with a prompt (`tether run --image FILE`, `/image FILE` in the
interactive mode): read on the client's side, since the daemon may run on another machine,
checked by their magic bytes and size before anything is sent, so a file that is no image, or
one too large for a message, is refused here with a clear error and nothing is lost.

`@shot.png` in a prompt needs none of this: a mention names a workspace file, which the daemon
reads itself and sends as an image when it is one. Standard library only (no msgspec).
"""

import base64
import os

from tether.clients.cli.exit_codes import EXIT_USAGE, CliError
from tether.protocol.images import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    MAX_IMAGES_BYTES,
    describe_over,
    sniff_image,
)


class ImageFile:
    """An image file read for a message: its name (the file's), type and bytes."""

    __slots__ = ("data", "mime_type", "name")

    def __init__(self, name: str, mime_type: str, data: bytes) -> None:
        self.name = name
        self.mime_type = mime_type
        self.data = data

    def wire(self) -> dict[str, str]:
        """As `turn/start`'s `images` entry on the wire (`ImageInput`)."""
        return {
            "name": self.name,
            "mimeType": self.mime_type,
            "data": base64.b64encode(self.data).decode("ascii"),
        }


def read_image(path: str) -> ImageFile:
    """The image at `path`; `CliError` (a usage error) saying why when it cannot be sent."""
    expanded = os.path.expanduser(path)
    try:
        with open(expanded, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise CliError(
                    f"{path}: {describe_over(size, MAX_IMAGE_BYTES)}"
                    " an image may have; shrink it first",
                    EXIT_USAGE,
                )
            data = file.read(MAX_IMAGE_BYTES + 1)
    except IsADirectoryError:
        raise CliError(f"{path}: a folder, not an image file", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read it ({exc.strerror or exc})", EXIT_USAGE) from None
    mime = sniff_image(data)
    if mime is None:
        raise CliError(
            f"{path}: not a PNG, JPEG, GIF or WebP image (tether goes by the file's content)",
            EXIT_USAGE,
        )
    return ImageFile(os.path.basename(expanded) or path, mime, data)


def read_images(paths: list[str]) -> list[ImageFile]:
    """The images at `paths`, in order, checked together (`check_together`)."""
    if len(paths) > MAX_IMAGES:
        raise CliError(
            f"{len(paths)} images, over the {MAX_IMAGES} a message may carry", EXIT_USAGE
        )
    return check_together([read_image(path) for path in paths])


def check_together(images: list[ImageFile]) -> list[ImageFile]:
    """`images`, when one message may carry them all (`CliError` otherwise)."""
    if len(images) > MAX_IMAGES:
        raise CliError(
            f"{len(images)} images, over the {MAX_IMAGES} a message may carry", EXIT_USAGE
        )
    total = sum(len(image.data) for image in images)
    if total > MAX_IMAGES_BYTES:
        raise CliError(
            f"the images take {describe_over(total, MAX_IMAGES_BYTES)}"
            " one message may carry; send fewer or smaller ones",
            EXIT_USAGE,
        )
    return images
