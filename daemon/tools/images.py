"""Images a tool returns for the model to see (an MCP tool's `image` blocks).

A tool hands the bytes it got to the `ImageKeeper` its context offers under
`IMAGES_SERVICE`: the keeper checks them and makes them fit for the model exactly as an
image sent with a message (`tether.daemon.context.images`), keeps them with the session (so a
reloaded session sends them again), and gives back a `ToolImage`, or the reason it refused
them. Without a keeper (a context that offers none) a tool returns no images, only text.
"""

from typing import Protocol, runtime_checkable

import msgspec

from tether.protocol.items import ImageRef

IMAGES_SERVICE = "images"


class ToolImage(msgspec.Struct, frozen=True, kw_only=True):
    """An image of a tool's result, ready for the model: its description and its bytes."""

    ref: ImageRef
    data: bytes


@runtime_checkable
class ImageKeeper(Protocol):
    async def keep(self, name: str, data: bytes) -> ToolImage | str:
        """`data` checked, made fit for the model and kept with the session; or, when it is
        refused (not a PNG, JPEG, GIF or WebP image, damaged, too large), why."""
        ...


def image_keeper(services: dict[str, object]) -> ImageKeeper | None:
    """The keeper among a tool context's services, if it offers one."""
    keeper = services.get(IMAGES_SERVICE)
    return keeper if isinstance(keeper, ImageKeeper) else None
