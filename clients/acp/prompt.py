"""What an ACP prompt becomes: its content blocks as the params of a tether `turn/start`."""

import base64
import posixpath
from urllib.parse import unquote, urlparse

from tether.clients.acp import params as p
from tether.clients.acp.peer import INVALID_PARAMS, AcpError
from tether.protocol.methods import Attachment, ImageInput, TurnStartParams


def turn_params(session_id: str, blocks: list[p.ContentBlock]) -> TurnStartParams:
    """What a prompt's content blocks become: text, mentions (files the editor links to),
    attachments (resources it embeds) and images (the daemon checks them, and refuses them
    for a model that takes none)."""
    texts: list[str] = []
    mentions: list[str] = []
    attachments: list[Attachment] = []
    images: list[ImageInput] = []
    for block in blocks:
        match block:
            case p.Text(text=text):
                texts.append(text)
            case p.ResourceLink(uri=uri, name=name):
                path = _file_path(uri)
                if path is not None:  # the daemon says when it is outside the workspace
                    mentions.append(path)
                else:
                    texts.append(f"[{name or uri}]({uri})")
            case p.EmbeddedResource(resource=resource):
                if resource.text is None:
                    raise AcpError(
                        INVALID_PARAMS, f"{resource.uri}: binary resources are not supported"
                    )
                name = _file_path(resource.uri) or resource.uri
                attachments.append(Attachment(name=name, text=resource.text))
            case p.Image(data=data, mime_type=mime_type, uri=uri):
                try:
                    raw = base64.b64decode(data, validate=True)
                except ValueError:
                    raise AcpError(INVALID_PARAMS, "an image block's data is not base64") from None
                where = (_file_path(uri) or uri) if uri else ""
                name = posixpath.basename(where) or f"image {len(images) + 1}"
                images.append(ImageInput(name=name, data=raw, mime_type=mime_type))
            case p.Audio():
                raise AcpError(
                    INVALID_PARAMS, "tether takes text, links, text resources and images only"
                )
    text = "\n\n".join(texts)
    if not text.strip() and images:
        # An editor may send a picture alone; a turn needs words, so these stand in for them.
        text = IMAGES_ONLY_TEXT
    return TurnStartParams(
        session_id=session_id,
        text=text,
        mentions=mentions,
        attachments=attachments,
        images=images,
    )


IMAGES_ONLY_TEXT = "(the attached image)"
"""The text of a prompt that is only images."""


def _file_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path)
