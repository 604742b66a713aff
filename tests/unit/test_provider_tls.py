"""Which TLS trust a provider's transport carries: the CA bundle for an https base URL; none at
all for a plain-HTTP one (tether's own transport, which speaks no TLS, and whose start does not
pay for loading the bundle); a context that trusts nothing for any other URL."""

import ssl

import httpx
import pytest

from tether.daemon.providers.http11 import PlainHTTPTransport
from tether.daemon.providers.wire import model_transport


def trust(transport: httpx.AsyncBaseTransport) -> ssl.SSLContext:
    assert isinstance(transport, httpx.AsyncHTTPTransport)
    context = transport._pool._ssl_context
    assert isinstance(context, ssl.SSLContext)
    return context


async def test_an_https_server_is_verified_against_the_ca_bundle() -> None:
    async with model_transport("https://api.example", None) as transport:
        context = trust(transport)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs() != []


async def test_a_plain_http_server_gets_a_transport_that_speaks_no_tls() -> None:
    async with model_transport("http://127.0.0.1:1/v1", None) as transport:
        assert isinstance(transport, PlainHTTPTransport)
        with pytest.raises(httpx.UnsupportedProtocol):
            await transport.handle_async_request(httpx.Request("GET", "https://api.example/"))


async def test_any_other_url_gets_a_context_that_trusts_nothing() -> None:
    async with model_transport("localhost:11434/v1", None) as transport:
        context = trust(transport)
    # Were it ever used, it would verify and accept no certificate.
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs() == []
