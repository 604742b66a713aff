"""The one base class every wire struct derives from.

camelCase on the wire, snake_case in Python; frozen and keyword-only so messages are values;
defaults are omitted when encoding, which keeps frames small and lets old clients ignore fields
they do not know.
"""

import msgspec


class Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of all protocol messages."""
