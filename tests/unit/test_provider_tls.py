"""Which TLS trust a provider's HTTP client carries: the CA bundle for an https base URL, none
for a plain-HTTP one (which never uses TLS, and whose start should not pay for loading it)."""

import ssl

import httpx

from tether.daemon.providers.wire import http_client


def trust(client: httpx.AsyncClient) -> ssl.SSLContext:
    transport = client._transport
    assert isinstance(transport, httpx.AsyncHTTPTransport)
    context = transport._pool._ssl_context
    assert isinstance(context, ssl.SSLContext)
    return context


async def test_an_https_server_is_verified_against_the_ca_bundle() -> None:
    async with http_client(
        {}, base_url="https://api.example", silence_timeout=5, transport=None
    ) as c:
        context = trust(c)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs() != []


async def test_a_plain_http_server_gets_a_context_that_trusts_nothing() -> None:
    async with http_client(
        {}, base_url="http://127.0.0.1:1/v1", silence_timeout=5, transport=None
    ) as c:
        context = trust(c)
    # Were it ever used, it would verify and accept no certificate.
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs() == []
