"""JSON-RPC 2.0 framing: one message per websocket text frame, no batches.

Incoming frames are decoded in two stages: first the envelope with `params` left as
`msgspec.Raw`, then the params with a decoder cached per method (see `tether.protocol.codec`).
That keeps a malformed params object from hiding the request id, so the error can be addressed.

An absent `id` makes a notification; `"id": null` is a request like any other (JSON-RPC 2.0
answers it with `"id": null`), so the envelope tells the two apart with `msgspec.UNSET`.
"""

import msgspec

from tether.protocol.errors import ErrorCode

RequestId = str | int


class Envelope(msgspec.Struct, kw_only=True):
    """Any JSON-RPC message, loosely: a request, a notification or a response."""

    jsonrpc: str | None = None
    id: RequestId | msgspec.UnsetType | None = msgspec.UNSET
    """UNSET when the member is absent (a notification), None for an explicit null."""
    method: str | None = None
    # msgspec.Raw cannot sit in a union; an absent member is an empty Raw.
    params: msgspec.Raw = msgspec.Raw(b"")
    result: msgspec.Raw = msgspec.Raw(b"")
    error: "ErrorObject | None" = None


class ErrorObject(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: int
    message: str
    data: object = None


class Request(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId
    method: str
    params: object = None


class Notification(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: object = None


class Response(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    result: object


class ErrorResponse(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    error: ErrorObject


_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)


class FrameError(Exception):
    """A frame that cannot be read as a JSON-RPC message at all. `request_id` is the frame's
    `id` when it could still be read (an object with a well-typed `id`), else None."""

    def __init__(self, code: ErrorCode, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def _readable_id(value: object) -> RequestId | None:
    if isinstance(value, dict):
        request_id = value.get("id")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            return request_id
    return None


_TOO_DEEP = "parse error: JSON nested too deeply"


def decode_envelope(frame: bytes | str) -> Envelope:
    """Decode one frame; raise `FrameError` with -32700 or -32600 when it is not a message
    (-32700 too for JSON nested deeper than the reader goes)."""
    # msgspec's reader recurses per nesting level, skipped values included.
    try:
        return _envelope_decoder.decode(frame)
    except RecursionError as exc:
        raise FrameError(ErrorCode.PARSE_ERROR, _TOO_DEEP) from exc
    except msgspec.DecodeError as exc:
        try:
            value = msgspec.json.decode(frame)
        except RecursionError:
            raise FrameError(ErrorCode.PARSE_ERROR, _TOO_DEEP) from exc
        except msgspec.DecodeError:
            raise FrameError(ErrorCode.PARSE_ERROR, f"parse error: {exc}") from exc
        if isinstance(value, list):
            raise FrameError(
                ErrorCode.INVALID_REQUEST, "batches are not supported; send one message per frame"
            ) from exc
        raise FrameError(
            ErrorCode.INVALID_REQUEST, f"invalid request: {exc}", _readable_id(value)
        ) from exc


def encode(message: Request | Notification | Response | ErrorResponse) -> bytes:
    return _encoder.encode(message)


def error_frame(
    request_id: RequestId | None, code: int, message: str, data: object = None
) -> bytes:
    return _encoder.encode(
        ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))
    )


def result_frame(request_id: RequestId | None, result: object) -> bytes:
    return _encoder.encode(Response(id=request_id, result=result))


def notification_frame(method: str, params: object) -> bytes:
    return _encoder.encode(Notification(method=method, params=params))


def request_frame(request_id: RequestId, method: str, params: object) -> bytes:
    return _encoder.encode(Request(id=request_id, method=method, params=params))
