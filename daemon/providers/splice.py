"""Splicing pre-encoded JSON: the dialects join the encodings cached on messages without
decoding them."""

from collections.abc import Iterable

import msgspec


def join_json_strings(parts: Iterable[msgspec.Raw], separator: str) -> msgspec.Raw:
    """One JSON string from several encoded JSON strings, joined by `separator`.

    JSON string escapes are local, so stripping the quotes and concatenating is exact: this
    merges cached encodings with a memory copy instead of decoding and re-encoding them.
    """
    inner = [memoryview(part)[1:-1] for part in parts]
    sep = msgspec.json.encode(separator)[1:-1]
    return msgspec.Raw(b'"' + sep.join(inner) + b'"')


def join_json_arrays(parts: Iterable[msgspec.Raw]) -> msgspec.Raw:
    """One JSON array from several encoded JSON arrays (empty ones drop out)."""
    inner = [memoryview(part)[1:-1] for part in parts if len(memoryview(part)) > 2]
    return msgspec.Raw(b"[" + b",".join(inner) + b"]")
