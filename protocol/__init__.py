"""tether.protocol: the wire vocabulary shared by the daemon and every client.

A leaf package: it imports only the standard library and msgspec and does no I/O, so any client
(and any tool that generates code from the schema) can depend on it without pulling in the daemon.
"""

from tether.protocol.version import PROTOCOL_VERSION, __version__

__all__ = ["PROTOCOL_VERSION", "__version__"]
