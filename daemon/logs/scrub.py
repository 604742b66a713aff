"""Masking secrets in a log line, the last thing done before it is written.

Log records are built without headers or environments, so a secret reaches a line only by
accident (an exception's message, a model's reply quoting a key). The scrubber is the net
under that rule: every value it was told of (the daemon's token, API keys, the values of the
environment variables commands do not get) and the value after an `Authorization`,
`x-api-key`, `api_key` or `Bearer` is replaced by `MASK` when it looks like a credential (8
characters or more, not a lowercase word). Known values shorter than `MIN_SECRET_CHARS` are
not masked: masking `1` would wreck every line, and no key is that short.
"""

import re
import threading

import msgspec

MASK = b"[redacted]"
MIN_SECRET_CHARS = 6

_HEADER = re.compile(
    rb"(?i)(authorization|x-api-key|api[-_]?key|bearer)"
    # what may stand between the name and the value in a header, a dict's repr or JSON
    rb"((?:\\?[\"'])?\s*[:=]?\s*(?:\\?[\"'])?\s*(?:bearer\s+|basic\s+)?)"
    rb"([^\s\"'\\,;:}\]]{8,})"
)
_WORD = re.compile(rb"[a-z]+")


class Scrubber:
    """The secrets to mask, and `scrub`, which masks them in an encoded line. Thread-safe: the
    store's thread logs too."""

    def __init__(self, secrets: list[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[bytes, ...] = ()
        for secret in secrets or []:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Mask `secret` from now on (ignored when shorter than `MIN_SECRET_CHARS`)."""
        if len(secret) < MIN_SECRET_CHARS:
            return
        # Both as it is and as JSON writes it inside a string (quotes, backslashes, controls).
        forms = {secret.encode(), msgspec.json.encode(secret)[1:-1]}
        with self._lock:
            known = set(self._secrets) | forms
            # Longest first: a secret that contains another is masked whole.
            self._secrets = tuple(sorted(known, key=len, reverse=True))

    def scrub(self, line: bytes) -> bytes:
        """`line` with every known secret and header value masked."""
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, MASK)
        lowered = line.lower()
        # Most lines name no header: three substring checks spare them the expression.
        if b"authorization" in lowered or b"bearer" in lowered or b"api" in lowered:
            line = _HEADER.sub(_mask_value, line)
        return line


def _mask_value(match: re.Match[bytes]) -> bytes:
    value = match.group(3)
    # Prose ("a wrong bearer token", "authorization required") names a header without one.
    if value == MASK or _WORD.fullmatch(value):
        return match.group(0)
    return match.group(1) + match.group(2) + MASK
