"""How the listing commands print: `--json` as one line of JSON, else one line per thing, or
a line saying there is none, or the text a command describes a result with."""

from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from tether.clients.cli.exit_codes import EXIT_OK

T = TypeVar("T")


def print_json(value: object) -> None:
    """`value` (protocol Structs included) as one line of JSON on stdout."""
    print(msgspec.json.encode(value).decode())


def print_report(value: T, *, as_json: bool, describe: Callable[[T], str]) -> int:
    """`value` as JSON, or the text `describe` makes of it; the exit code."""
    if as_json:
        print_json(value)
    else:
        print(describe(value))
    return EXIT_OK


def print_listing(
    items: Sequence[T], *, as_json: bool, empty: str, line: Callable[[T], str]
) -> int:
    """`items` as JSON, or `line` of each, or `empty` when there are none; the exit code."""
    if as_json:
        print_json(items)
    elif not items:
        print(empty)
    else:
        for item in items:
            print(line(item))
    return EXIT_OK


def age(seconds: float) -> str:
    """How long ago, in the largest whole unit: `3h ago`, `just now`."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"
