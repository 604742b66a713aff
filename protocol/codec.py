"""Encoding and decoding of params, results and notifications, with decoders cached per type.

`decode_params` turns msgspec's validation message into one that names the offending field in
its wire (camelCase) spelling, which is what a client author sees in their own code.
"""

from typing import TypeVar, cast

import msgspec

from tether.protocol.base import Wire
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import METHODS, NOTIFICATIONS

T = TypeVar("T", bound=Wire)

_encoder = msgspec.json.Encoder()


_decoders: dict[type[Wire], msgspec.json.Decoder[Wire]] = {}


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    return cast(msgspec.json.Decoder[T], decoder)


def decode_as(kind: type[T], raw: bytes | msgspec.Raw) -> T:
    return _decoder(kind).decode(raw)


def decode_params(method: str, raw: msgspec.Raw) -> Wire:
    """Decode the params of `method`; raise `RpcError(INVALID_PARAMS)` naming the bad field.
    Absent or null params read as `{}`."""
    kind = METHODS[method].params
    data: bytes | msgspec.Raw = raw if len(raw) and bytes(raw) != b"null" else b"{}"
    try:
        return _decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        raise RpcError(ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}") from exc


def decode_notification(method: str, raw: bytes | msgspec.Raw) -> Wire:
    return _decoder(NOTIFICATIONS[method]).decode(raw)


def read_notification(method: str, raw: bytes | msgspec.Raw) -> Wire | None:
    """The params of a notification a client knows, or None for one it must ignore: a method
    it does not know, or params it cannot read (an event or item type, or an enum value, that a
    newer daemon sends). Clients ignore what they do not know rather than fail."""
    kind = NOTIFICATIONS.get(method)
    if kind is None or not len(raw):
        return None
    try:
        return _decoder(kind).decode(raw)
    except msgspec.ValidationError:
        return None


def encode(value: object) -> bytes:
    return _encoder.encode(value)


def to_builtins(value: object) -> object:
    return msgspec.to_builtins(value)
