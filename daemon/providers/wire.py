"""What the HTTP dialects' clients share on the wire: their base class (`DialectClient`) with
the settings, the connection pool, the model list and the streamed POST of a request.

The errors they map are in `errors.py`, the reading of their streams in `stream.py`."""

import copy
import http.cookiejar
import ssl
from collections.abc import Callable, Mapping
from typing import ClassVar, Self, TypedDict

import httpx
import msgspec

from tether.daemon.logs.log import DEBUG, add_secret, clip_bytes, get_logger
from tether.daemon.providers.base import (
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelResponse,
    StreamCallbacks,
)
from tether.daemon.providers.errors import status_error, transport_errors
from tether.daemon.providers.http11 import PlainHTTPTransport
from tether.daemon.providers.stream import StreamedReply, accept_stream
from tether.daemon.providers.texttools import ToolMode

log = get_logger(__name__)

_JSON_CONTENT = ("content-type", "application/json")


class NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps and sends none. A model API sets no cookie tether needs, and
    httpx otherwise parses every response's headers for cookies and every request's jar for
    a header (some 30 µs a step, on the step's critical path)."""

    def extract_cookies(self, response: object, request: object) -> None:
        return None

    def add_cookie_header(self, request: object) -> None:
        return None


def model_transport(
    base_url: str, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncBaseTransport:
    """What a dialect's requests go through: `transport` when given (a test's); for a
    plain-HTTP base URL (a local model), tether's own small HTTP/1.1 transport
    (`PlainHTTPTransport`: httpcore and h11 cost more CPU per call than the rest of the call,
    and their import tens of ms of the first turn), which speaks no TLS at all; otherwise
    httpx's own, without proxies from the environment (the servers are configured directly).

    Only an `https` base URL gets the CA bundle: loading it costs more than the rest of the
    client. Any other URL httpx's transport is given (one it will refuse) gets a TLS context
    that verifies as strictly but trusts no certificate at all, so TLS to anything else fails
    rather than go unverified (redirects are not followed)."""
    if transport is not None:
        return transport
    lowered = base_url.lower()
    if lowered.startswith("http:"):
        return PlainHTTPTransport()
    verify: ssl.SSLContext | bool = True
    if not lowered.startswith("https:"):
        verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return httpx.AsyncHTTPTransport(verify=verify, trust_env=False)


def http_client(
    headers: Mapping[str, str], *, silence_timeout: float, transport: httpx.AsyncBaseTransport
) -> httpx.AsyncClient:
    """The client a dialect talks through, over `transport` (`model_transport`):
    `silence_timeout` bounds the wait for each read of a stream. Cookies are neither kept nor
    sent (`NoCookies`)."""
    return httpx.AsyncClient(
        headers=dict(headers),
        cookies=NoCookies(),
        timeout=httpx.Timeout(connect=10.0, read=silence_timeout, write=30.0, pool=10.0),
        transport=transport,
        trust_env=False,
    )


class _ModelEntry(msgspec.Struct):
    id: str


class _ModelList(msgspec.Struct):
    data: list[_ModelEntry] = []


_models_decoder = msgspec.json.Decoder(_ModelList)


async def fetch_model_ids(
    http: httpx.AsyncClient,
    url: str,
    *,
    base_url: str,
    unreachable_hint: str,
    http_error: Callable[[httpx.Response], ModelError],
    params: Mapping[str, int] | None = None,
) -> list[str]:
    """GET a `{"data": [{"id": ...}]}` model list with a short timeout; sorted ids."""
    with transport_errors(base_url, unreachable_hint):
        response = await http.get(url, params=params, timeout=5.0)
    if response.status_code >= 400:
        raise http_error(response)
    try:
        listing = _models_decoder.decode(response.content)
    except msgspec.DecodeError as exc:
        raise ModelProtocolError(f"{url} answered with no model list: {exc}") from exc
    return sorted(entry.id for entry in listing.data)


class DialectOptions(TypedDict, total=False):
    """`DialectClient`'s optional settings, for a dialect's own constructor to pass on."""

    api_key: str
    silence_timeout: float
    tool_mode: ToolMode
    config_hint: str
    transport: httpx.AsyncBaseTransport | None
    images: bool


class DialectClient:
    """What the clients of both dialects share: the settings, the connection pool (shared with
    `with_model` twins), the model list, and the streamed POST of a request.

    A dialect names its `provider`, the paths of its model list and of its streamed requests,
    and supplies the words of its errors (`_unreachable_hint`, `_http_error`, `_stream_fix`)."""

    provider: ClassVar[str]
    models_path: ClassVar[str]
    """The model list's path below `base_url`."""
    models_params: ClassVar[Mapping[str, int] | None] = None
    stream_path: ClassVar[str]
    """The path below `base_url` that requests are POSTed to."""
    dialect_json: ClassVar[str]
    """What its stream's lines are, for a message about lines that are not."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        silence_timeout: float = 300.0,
        tool_mode: ToolMode = "auto",
        config_hint: str = "config.toml",
        transport: httpx.AsyncBaseTransport | None = None,
        images: bool = True,
    ) -> None:
        self.model = model
        self.images = images
        """Whether the model is sent images; when not, each image of the history goes as a
        line of text naming it (the session's model changed after it was sent)."""
        self.base_url = self._api_root(base_url)
        self.tool_mode: ToolMode = tool_mode
        self.text_tools = tool_mode == "text"
        """True once tools go as text: configured, or switched to by `auto`."""
        self._config_hint = config_hint
        self._silence_timeout = silence_timeout
        # The key goes into a header only here; no line may show it, whatever quotes it.
        add_secret(api_key)
        self._stream_url: httpx.URL | None = None
        """Parsed at the first request (where a bad URL's error is mapped), then kept: httpx
        would parse the string again for every request."""
        self._stream = model_transport(self.base_url, transport)
        """The client's transport. The streamed requests are sent through it directly, as
        `_http` would send them (its headers, timeouts and no cookies), without the client's own
        work per request (redirects, auth, cookies, event hooks: none of which tether uses)."""
        self._http = http_client(
            self._headers(api_key), silence_timeout=silence_timeout, transport=self._stream
        )
        self._stream_headers = [*self._http.headers.multi_items(), _JSON_CONTENT]
        self._stream_extensions = {"timeout": self._http.timeout.as_dict()}

    @staticmethod
    def _api_root(base_url: str) -> str:
        """The root that the paths hang off, for a configured base URL."""
        return base_url.rstrip("/")

    @staticmethod
    def _headers(api_key: str) -> dict[str, str]:
        """The headers of every request, carrying `api_key` (empty: none)."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def aclose(self) -> None:
        await self._http.aclose()  # and its transport, `_stream`

    def with_model(self, model: str) -> Self:
        """This client calling `model` instead: the same server, key and connection pool
        (closing this client closes them for both)."""
        twin = copy.copy(self)
        twin.model = model
        return twin

    async def list_models(self) -> list[str]:
        return await fetch_model_ids(
            self._http,
            f"{self.base_url}{self.models_path}",
            params=self.models_params,
            base_url=self.base_url,
            unreachable_hint=self._unreachable_hint(),
            http_error=lambda response: self._http_error(
                response, what=f"model list ({self.models_path})"
            ),
        )

    async def _read_stream(self, response: httpx.Response, reply: StreamedReply) -> None:
        """Read the reply's stream into `reply` (see `StreamedReply`)."""
        raise NotImplementedError

    async def _post(
        self, body: bytes, callbacks: StreamCallbacks, *, text_mode: bool
    ) -> ModelResponse:
        """POST `body` and read the reply's stream; raises `Rejected` for an error status."""
        if log.enabled(DEBUG):
            # The body only: the headers carry the key.
            log.debug(
                "model request",
                provider=self.provider,
                model=self.model,
                path=self.stream_path,
                bytes=len(body),
                body=clip_bytes(body),
            )
        with transport_errors(
            self.base_url, self._unreachable_hint(), silence_timeout=self._silence_timeout
        ):
            if self._stream_url is None:
                # As the client would send it: a URL without a scheme or host is made relative,
                # and refused by the transport as one without a protocol.
                url = f"{self.base_url}{self.stream_path}"
                self._stream_url = self._http.build_request("POST", url).url
            request = httpx.Request(
                "POST",
                self._stream_url,
                headers=self._stream_headers,
                content=body,
                extensions=self._stream_extensions,
            )
            response = await self._stream.handle_async_request(request)
            try:
                await accept_stream(response, base_url=self.base_url, fix=self._stream_fix())
                reply = StreamedReply(callbacks, text_mode=text_mode)
                await self._read_stream(response, reply)
                answer = reply.finish(
                    base_url=self.base_url,
                    dialect_json=self.dialect_json,
                    request_bytes=len(body),
                )
            finally:
                await response.aclose()
        if log.enabled(DEBUG):
            log.debug(
                "model response",
                provider=self.provider,
                model=self.model,
                body=clip_bytes(msgspec.json.encode(answer)),
            )
        return answer

    def _unreachable_hint(self) -> str:
        """What to check when nothing answers at `base_url`."""
        raise NotImplementedError

    def _stream_fix(self) -> str:
        """What to check when a 2xx answer is not an event stream."""
        raise NotImplementedError

    def _http_error(self, response: httpx.Response, what: str = "") -> ModelHTTPError:
        """The error for an HTTP error status; `what` names the resource asked for (empty: the
        model)."""
        raise NotImplementedError

    def _status_error(
        self,
        response: httpx.Response,
        *,
        server: str,
        key_fix: str,
        not_found: Callable[[str], str],
    ) -> ModelHTTPError:
        """`status_error` for this client's model, server and config file."""
        return status_error(
            response,
            server=server,
            key_fix=key_fix,
            not_found=not_found,
            model=self.model,
            base_url=self.base_url,
            config_hint=self._config_hint,
        )
