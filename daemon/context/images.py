"""Images a user attaches, made fit for the model: checked, and downscaled when too large.

Rules:
- An image is recognised by its magic bytes (`tether.protocol.images`): PNG, JPEG, GIF or
  WebP, whatever its name says. Anything else, a header that gives no size, or more than
  `MAX_IMAGE_BYTES` (10 MiB) is refused with a `ImageProblem` that says so; so is a picture
  over `MAX_PIXELS` (50 megapixels), which would take too much memory to decode.
- What is sent must fit every dialect, so a session whose model changes keeps images it can
  send: at most `MAX_SENT_BYTES` (3.75 MiB, which is Anthropic's 5 MB limit once base64 has
  made it a third larger; OpenAI takes 20 MB), and a long edge of at most `MAX_EDGE[dialect]`:
  1568 px for Anthropic (the size it recommends, and scales larger images down to itself;
  its hard limit is 8000, 2000 with more than 20 images) and 2000 px for OpenAI-compatible
  servers (the long side of OpenAI's high-detail mode; it scales larger ones down). An
  animated GIF is sent as its first frame in PNG (OpenAI takes only still GIFs).
- An image within those limits is sent byte for byte and Pillow is not imported. One over
  them is decoded with Pillow (imported then, in the worker thread that prepares it), turned
  upright by its EXIF orientation, resized with Lanczos to the edge, and written in its own
  format (a GIF as PNG); when that is still too large, as JPEG at quality 85 (transparency
  over white), then smaller by a quarter at a time.
- For the context budget an image counts as Anthropic's estimate, width x height / 750
  tokens, at least 85 and at most 1,600 (`image_tokens`): what a 1568 px image costs there,
  and more than OpenAI's high-detail count for the same picture, so the budget errs safe.

`prepare_image` decodes and encodes synchronously: call it from a worker thread.
"""

import hashlib
import io
from typing import TYPE_CHECKING, Final

import msgspec

from tether.daemon.providers.base import ImagePart
from tether.protocol.images import (
    MAX_IMAGE_BYTES,
    describe_over,
    gif_frames,
    image_size,
    sniff_image,
)
from tether.protocol.items import ImageRef

if TYPE_CHECKING:  # Pillow is imported only when an image must be resized
    from PIL.Image import Image as PILImage

MAX_SENT_BYTES: Final = 5 * 1024 * 1024 * 3 // 4
MAX_EDGE: Final = {"anthropic": 1568, "openai": 2000}
MAX_PIXELS: Final = 50_000_000
JPEG_QUALITY: Final = 85
IMAGE_TOKENS_MAX: Final = 1600
IMAGE_TOKENS_MIN: Final = 85


class ImageProblem(Exception):
    """The attached data is not an image tether can send; the message says why."""


class PreparedImage(msgspec.Struct, frozen=True, kw_only=True):
    """An image ready for the model: its description for events and its bytes."""

    ref: ImageRef
    data: bytes

    def part(self) -> ImagePart:
        return image_part(self.ref, self.data)


def image_part(ref: ImageRef, data: bytes) -> ImagePart:
    return ImagePart(
        name=ref.name, mime_type=ref.mime_type, data=data, width=ref.width, height=ref.height
    )


def image_tokens(width: int, height: int) -> int:
    """Tokens an image of this size counts for in the context budget (module docstring)."""
    return max(IMAGE_TOKENS_MIN, min(IMAGE_TOKENS_MAX, width * height // 750))


def check_image(name: str, data: bytes) -> tuple[str, int, int]:
    """(mime type, width, height) of `data`, or `ImageProblem` saying why it is refused."""
    mime = sniff_image(data)
    if mime is None:
        raise ImageProblem(f"{name}: not a PNG, JPEG, GIF or WebP image")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageProblem(f"{name}: {describe_over(len(data), MAX_IMAGE_BYTES)} an image may have")
    size = image_size(data, mime)
    if size is None:
        raise ImageProblem(f"{name}: a damaged {mime.removeprefix('image/')} (no size)")
    width, height = size
    if width * height > MAX_PIXELS:
        raise ImageProblem(
            f"{name}: {width}x{height} pixels, over the {MAX_PIXELS // 1_000_000} megapixels an"
            " image may have"
        )
    return mime, width, height


def prepare_image(name: str, data: bytes, dialect: str) -> PreparedImage:
    """`data` made fit for `dialect` (`openai` or `anthropic`) and every other (module
    docstring); `ImageProblem` when it is refused."""
    mime, width, height = check_image(name, data)
    edge = MAX_EDGE.get(dialect, min(MAX_EDGE.values()))
    animated = mime == "image/gif" and gif_frames(data) > 1
    if len(data) <= MAX_SENT_BYTES and max(width, height) <= edge and not animated:
        return PreparedImage(ref=_ref(name, mime, data, width, height), data=data)
    sent, sent_mime, sent_width, sent_height = _downscale(name, data, mime, edge)
    ref = _ref(name, sent_mime, sent, sent_width, sent_height)
    ref = msgspec.structs.replace(
        ref, original_size=len(data), original_width=width, original_height=height
    )
    return PreparedImage(ref=ref, data=sent)


def _ref(name: str, mime: str, data: bytes, width: int, height: int) -> ImageRef:
    return ImageRef(
        name=name,
        mime_type=mime,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        width=width,
        height=height,
    )


_FORMATS: Final = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}


def _downscale(name: str, data: bytes, mime: str, edge: int) -> tuple[bytes, str, int, int]:
    """(bytes, mime type, width, height) of the image made to fit `edge` and
    `MAX_SENT_BYTES`."""
    # Imported here: only an image over the limits needs a decoder.
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.seek(0)
            if mime == "image/jpeg":  # decoded at a reduced scale already, when that fits
                opened.draft("RGB", _fit(opened.size, edge))
            # A photo's EXIF orientation is applied: the APIs would not, and the model would
            # see it on its side.
            upright = ImageOps.exif_transpose(opened)
            picture = upright.convert("RGBA" if _has_alpha(upright) else "RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageProblem(f"{name}: cannot be decoded ({exc})") from exc
    fmt = _FORMATS.get(mime, "PNG")
    scale = min(1.0, edge / max(picture.size))
    while True:
        size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
        resized = picture
        if size != picture.size:
            # reducing_gap: a box reduction first, then Lanczos over the last factor of 2;
            # indistinguishable at these sizes, and several times faster.
            resized = picture.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)
        encoded = _encode(resized, fmt)
        if len(encoded) <= MAX_SENT_BYTES:
            return encoded, f"image/{fmt.lower()}", size[0], size[1]
        if fmt != "JPEG":
            fmt = "JPEG"  # the same size in a smaller format before a smaller size
            continue
        scale *= 0.75


def _has_alpha(picture: "PILImage") -> bool:
    return picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info


def _encode(picture: "PILImage", fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    if fmt == "JPEG":
        if picture.mode == "RGBA":
            flat = Image.new("RGB", picture.size, (255, 255, 255))
            flat.paste(picture, mask=picture.getchannel("A"))
            picture = flat
        picture.save(out, "JPEG", quality=JPEG_QUALITY)
    else:
        picture.save(out, fmt)
    return out.getvalue()


def _fit(size: tuple[int, int], edge: int) -> tuple[int, int]:
    """`size` scaled down to a long edge of `edge` (unchanged when it fits)."""
    scale = min(1.0, edge / max(size))
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))
