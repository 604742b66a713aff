"""Versions: the package release and the wire protocol revision.

`PROTOCOL_VERSION` changes only when an old client could misread a new daemon; adding an optional
field does not change it (unknown fields are ignored and every new field has a default).
"""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
