"""The params of the ACP requests `tether acp` answers, as it reads them (msgspec Structs).

Only the fields tether uses are declared; the others (`_meta`, `additionalDirectories`, a
newer spec's fields) are ignored, as ACP asks. `read` raises `AcpError(INVALID_PARAMS)`
naming the field that is wrong.
"""

from typing import Any, TypeVar

import msgspec

from tether.clients.acp.peer import INVALID_PARAMS, AcpError


class Params(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    pass


class Implementation(Params, frozen=True):
    name: str = ""
    title: str | None = None
    version: str = ""


class Initialize(Params, frozen=True):
    protocol_version: int | str = 1
    """Some editors send a date string from before ACP numbered its versions."""
    client_info: Implementation | None = None


class NewSession(Params, frozen=True):
    cwd: str
    mcp_servers: list[Any] = []


class LoadSession(Params, frozen=True):
    session_id: str
    cwd: str
    mcp_servers: list[Any] = []


class ListSessions(Params, frozen=True):
    cwd: str | None = None
    cursor: str | None = None


class SessionRef(Params, frozen=True):
    session_id: str


class Block(msgspec.Struct, tag_field="type", rename="camel", kw_only=True, frozen=True):
    pass


class Text(Block, frozen=True, tag="text"):
    text: str


class ResourceLink(Block, frozen=True, tag="resource_link"):
    uri: str
    name: str = ""


class Resource(Params, frozen=True):
    uri: str
    text: str | None = None
    blob: str | None = None


class EmbeddedResource(Block, frozen=True, tag="resource"):
    resource: Resource


class Image(Block, frozen=True, tag="image"):
    data: str
    """The image's bytes, base64."""
    mime_type: str = ""
    uri: str | None = None


class Audio(Block, frozen=True, tag="audio"):
    pass


ContentBlock = Text | ResourceLink | EmbeddedResource | Image | Audio


class Prompt(Params, frozen=True):
    session_id: str
    prompt: list[ContentBlock]


class SelectedOutcome(msgspec.Struct, tag_field="outcome", tag="selected", rename="camel"):
    option_id: str


class CancelledOutcome(msgspec.Struct, tag_field="outcome", tag="cancelled"):
    pass


class PermissionAnswer(msgspec.Struct, frozen=True):
    """The editor's answer to `session/request_permission`."""

    outcome: SelectedOutcome | CancelledOutcome


P = TypeVar("P")


def read(kind: type[P], params: object, method: str) -> P:
    try:
        return msgspec.convert({} if params is None else params, kind)
    except msgspec.ValidationError as exc:
        raise AcpError(INVALID_PARAMS, f"invalid params for {method}: {exc}") from exc
