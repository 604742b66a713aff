"""What a model server's error status is called in the message a person reads."""

import httpx
import pytest

from tether.daemon.providers.errors import RETRYABLE_STATUS, status_error


def error_for(status: int) -> str:
    response = httpx.Response(status, json={"error": {"message": "boom"}})
    return status_error(
        response,
        server="The model server at http://127.0.0.1:1",
        key_fix="Set the key.",
        not_found=lambda detail: f"not found: {detail}",
        model="m",
        base_url="http://127.0.0.1:1",
        config_hint="config.toml",
    ).message


def test_an_internal_error_is_not_called_busy() -> None:
    message = error_for(500)
    assert "busy" not in message
    assert "failed with an internal error (HTTP 500: boom)" in message


@pytest.mark.parametrize("status", sorted(RETRYABLE_STATUS))
def test_every_retryable_status_is_worded_with_its_number(status: int) -> None:
    assert f"(HTTP {status}: boom)." in error_for(status)


def test_only_an_overload_or_rate_limit_is_called_busy_or_the_like() -> None:
    assert "rate-limiting" in error_for(429)
    assert "busy" in error_for(503)
    assert "overloaded" in error_for(529)
