"""The HTTP error ladder of the dialects: httpx failures and error statuses mapped to
`ModelError`s at the edge, in words that say what to fix.

Which failures are retryable (the loop retries those; see `ModelError.retryable`):

    HTTP 408 425 429 500 502 503 504 (and 529, Anthropic's "overloaded")   yes, with Retry-After
    connection refused / DNS / TLS (ModelUnreachable)                      yes, but the loop
                                                                            tries once more only
    a stream that broke off, or ended cleanly before the model finished    yes
    a server silent for the silence timeout (ModelTimeout)                 yes, but the loop
                                                                            tries once more only
    HTTP 401 403 404 and other 4xx                                          no: the message says
                                                                            what to fix
    a 200 answer that is not an event stream (an HTML page, JSON)          no: a retry gets the
    a stream of lines that are not the dialect's JSON                      same answer
"""

import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import cast

import httpx

from tether.daemon.providers.base import (
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelTimeout,
    ModelUnreachable,
)
from tether.daemon.providers.texttools import ToolMode, says_tools_unsupported

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504, 529})
TRANSIENT_TROUBLE = {
    408: "timed the request out",
    425: "asked for the request to be sent again later",
    429: "is rate-limiting requests",
    500: "failed with an internal error",
    502: "(or a proxy in front of it) got no valid answer upstream",
    503: "is unavailable or busy",
    504: "(or a proxy in front of it) timed out upstream",
    529: "is overloaded",
}
"""What a retryable status says happened, in words (a 500 is no sign of a busy server)."""
EXCERPT_CHARS = 120
"""How much of a body or line an error message quotes."""


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """The server's wait hint in seconds: `retry-after-ms`, or `Retry-After` as seconds or as
    an HTTP date; None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime  # only for a dated Retry-After, rarely

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_detail(response: httpx.Response) -> str:
    """The server's own words from an error body (`{"error": {"message"}}`, `{"error": "…"}`,
    Anthropic's `{"type": "error", "error": {…}}`), else the start of the body."""
    try:
        payload: object = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(payload, dict):
        error = cast(dict[str, object], payload).get("error")
        if isinstance(error, dict):
            message = cast(dict[str, object], error).get("message")
            if isinstance(message, str):
                return message
        if isinstance(error, str):
            return error
        detail = cast(dict[str, object], payload).get("detail")  # FastAPI-style servers
        if isinstance(detail, str):
            return detail
    return response.text[:300]


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` quoted, with control characters escaped, cut after `limit` characters."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


@contextmanager
def transport_errors(
    base_url: str, unreachable_hint: str, *, silence_timeout: float | None = None
) -> Generator[None]:
    """Map httpx failures raised inside the block to `ModelError`s (ModelErrors pass through).
    `silence_timeout` is the read timeout in force, named in the message when it runs out."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ModelUnreachable(
            f"Could not reach the model server at {base_url} ({exc or type(exc).__name__}). "
            + unreachable_hint,
            retryable=True,
        ) from exc
    except httpx.TimeoutException as exc:
        silent = f" for {silence_timeout:g} s" if silence_timeout is not None else ""
        raise ModelTimeout(
            f"The model server at {base_url} stopped responding: nothing arrived{silent}"
            f" ({type(exc).__name__}).",
            retryable=True,
        ) from exc
    except (httpx.RemoteProtocolError, httpx.NetworkError) as exc:
        raise ModelProtocolError(
            f"The stream from {base_url} broke off: {exc or type(exc).__name__}", retryable=True
        ) from exc
    except httpx.UnsupportedProtocol as exc:
        raise ModelError(
            f"The model server URL {base_url!r} is not an http(s) URL ({exc}). Fix TETHER_BASE_URL"
            " or `base_url` in the config."
        ) from exc
    except httpx.HTTPError as exc:
        raise ModelError(f"The request to {base_url} failed: {exc}") from exc


class Rejected(Exception):
    """The server answered a request with an HTTP error (the body is read)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def status_error(
    response: httpx.Response,
    *,
    server: str,
    key_fix: str,
    not_found: Callable[[str], str],
    model: str,
    base_url: str,
    config_hint: str,
) -> ModelHTTPError:
    """The error for an HTTP error status, in the dialect's words: `server` names who answered
    ("The model server at …"), `key_fix` says what to set when it refuses the key, and
    `not_found` words a 404 from the server's detail. Retryable for a transient trouble (never
    when it refuses tools, which a retry cannot change), with the server's Retry-After."""
    status = response.status_code
    detail = error_detail(response)
    refuses_tools = says_tools_unsupported(detail)
    if status in (401, 403):
        message = f"{server} refused the request (HTTP {status}: {detail}). {key_fix}"
    elif status == 404:
        message = not_found(detail)
    elif refuses_tools:
        message = (
            f"The model {model!r} at {base_url} does not take tool definitions"
            f' (HTTP {status}: {detail}). Set `tool_mode = "text"` (or "auto") under'
            f" [provider] in {config_hint}, or use a model with tool support."
        )
    elif status in RETRYABLE_STATUS:
        message = f"{server} {TRANSIENT_TROUBLE[status]} (HTTP {status}: {detail})."
    else:
        message = f"{server} answered HTTP {status}: {detail}"
    return ModelHTTPError(
        message,
        status=status,
        retryable=status in RETRYABLE_STATUS and not refuses_tools,
        retry_after=parse_retry_after(response.headers),
    )


def switches_to_text_tools(
    request: ModelRequest, *, text_mode: bool, tool_mode: ToolMode, detail: str
) -> bool:
    """Whether a refused request is to be repeated with the tools described in text: in `auto`
    tool mode, when native tools were sent and the server says the model takes none."""
    has_tools = request.offered_tools() is not None
    return has_tools and not text_mode and tool_mode == "auto" and says_tools_unsupported(detail)
