TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)
"""SHA-1 and SHA-256 from CPython's own modules rather than hashlib's: hashlib loads OpenSSL's
libcrypto first, milliseconds of every client's start, for the two hashes a start computes
(the workspace key and the websocket handshake's accept key). A build without the built-in
hashes (some distributions drop them) gets hashlib's."""

if TYPE_CHECKING:
    from hashlib import sha1, sha256
else:
    try:
        from _sha1 import sha1
    except ImportError:
        from hashlib import sha1
    try:
        from _sha2 import sha256  # Python 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:
            from hashlib import sha256

__all__ = ["sha1", "sha256"]
