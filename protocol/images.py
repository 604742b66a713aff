"""Images as both sides of the wire recognise them: by their magic bytes, never their name.

The four formats both model dialects take (PNG, JPEG, GIF, WebP) are recognised from their
first bytes, and their pixel size read from their headers, with the standard library only: a
client checks a file before it sends it (the CLI loads no msgspec for this), and the daemon
checks what it receives. Decoding pixels (to downscale) is the daemon's business.

`MAX_IMAGE_BYTES` caps one image as sent in `turn/start`, and `MAX_IMAGES_BYTES` all the images
of one message: base64 makes them a third larger, and the whole request must stay within the
transport's 16 MiB message limit (`tether.protocol.transport.MAX_MESSAGE_BYTES`).
"""

import struct
from typing import Final

IMAGE_MIME_TYPES: Final = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGE_BYTES: Final = 10 * 1024 * 1024
"""Largest image a message may carry (the daemon downscales what a provider would refuse)."""
MAX_IMAGES_BYTES: Final = 11 * 1024 * 1024
"""All the images of one message together: 14.7 MiB as base64, within the 16 MiB frame."""
MAX_IMAGES: Final = 20
"""Images one message may carry."""


def sniff_image(data: bytes) -> str | None:
    """The MIME type of `data` when it is a PNG, JPEG, GIF or WebP image, else None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes, mime_type: str) -> tuple[int, int] | None:
    """(width, height) in pixels read from the header of an image of `mime_type`, or None when
    the header is cut short or damaged."""
    try:
        match mime_type:
            case "image/png":
                if data[12:16] != b"IHDR":
                    return None
                width, height = struct.unpack(">II", data[16:24])
            case "image/gif":
                width, height = struct.unpack("<HH", data[6:10])
            case "image/webp":
                return _webp_size(data)
            case "image/jpeg":
                return _jpeg_size(data)
            case _:
                return None
    except struct.error:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
    elif chunk == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", data[26:30])
        width, height = width & 0x3FFF, height & 0x3FFF
    elif chunk == b"VP8L":
        if data[20:21] != b"\x2f":
            return None
        bits = int.from_bytes(data[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    else:
        return None
    return (width, height) if width > 0 and height > 0 else None


_JPEG_FRAMES = frozenset(
    {*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), 0xCD, 0xCE, 0xCF}
)
"""Start-of-frame markers (SOF0-SOF15 less DHT 0xC4, JPG 0xC8 and DAC 0xCC)."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return (width, height) if width > 0 and height > 0 else None
        at += 2 + length
    return None


def gif_frames(data: bytes, *, stop_after: int = 2) -> int:
    """How many frames a GIF holds, counted up to `stop_after` (0 when it is damaged)."""
    try:
        flags = data[10]
        at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
        frames = 0
        while at < len(data):
            block = data[at]
            if block == 0x3B:  # trailer
                return frames
            if block == 0x21:  # extension: label, then sub-blocks
                at = _skip_sub_blocks(data, at + 2)
            elif block == 0x2C:  # image descriptor
                frames += 1
                if frames >= stop_after:
                    return frames
                local = data[at + 9]
                at += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
                at = _skip_sub_blocks(data, at + 1)  # past the LZW minimum code size
            else:
                return frames
        return frames
    except IndexError:
        return 0


def _skip_sub_blocks(data: bytes, at: int) -> int:
    while data[at]:
        at += data[at] + 1
    return at + 1


def describe_size(size: int) -> str:
    """A byte count as people read it: `812 B`, `210 KB`, `3.4 MB` (powers of 1024)."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def describe_over(size: int, limit: int) -> str:
    """`size` next to the `limit` it is over, in words that tell them apart: `12.3 MB, over
    the 10.0 MB`, in bytes when both would read the same."""
    shown, cap = describe_size(size), describe_size(limit)
    if shown == cap:
        shown, cap = f"{size:,} bytes", f"{limit:,} bytes"
    return f"{shown}, over the {cap}"
