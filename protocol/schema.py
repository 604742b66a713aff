"""JSON Schema of the whole protocol, generated from the method table.

The committed copy lives at `packaging/schema/tether-protocol.schema.json`; regenerate it with
`python -m tether.protocol.schema > packaging/schema/tether-protocol.schema.json`. A test fails
when the committed copy is stale. Clients in other languages are written against it.
"""

import json
import sys

import msgspec

from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.errors import ERROR_DOCS
from tether.protocol.methods import CLIENT_NOTIFICATIONS, METHODS, NOTIFICATIONS
from tether.protocol.version import PROTOCOL_VERSION

_REF_TEMPLATE = "#/$defs/{name}"


def _schema_hook(kind: type) -> dict[str, object]:
    if kind is msgspec.Raw:
        return {"type": "object"}  # embedded JSON Schema documents
    raise NotImplementedError(f"no JSON Schema for {kind!r}")


def build_schema() -> dict[str, object]:
    kinds: list[object] = []
    for method in METHODS.values():
        kinds += [method.params, method.result]
    kinds += list(NOTIFICATIONS.values())
    kinds += list(CLIENT_NOTIFICATIONS.values())
    kinds.append(DiscoveryInfo)
    refs, defs = msgspec.json.schema_components(
        kinds, schema_hook=_schema_hook, ref_template=_REF_TEMPLATE
    )
    it = iter(refs)
    methods: dict[str, dict[str, object]] = {}
    for name, method in METHODS.items():
        methods[name] = {"description": method.doc, "params": next(it), "result": next(it)}
        if method.needs_controller:
            methods[name]["controllerOnly"] = True
    notifications = {name: {"params": next(it)} for name in NOTIFICATIONS}
    client_notifications = {name: {"params": next(it)} for name in CLIENT_NOTIFICATIONS}
    discovery = next(it)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tether protocol",
        "description": (
            "JSON-RPC 2.0 over a loopback websocket, one message per text frame. "
            "Send `initialize` first."
        ),
        "protocolVersion": PROTOCOL_VERSION,
        "methods": methods,
        "notifications": notifications,
        "clientNotifications": client_notifications,
        "discoveryFile": discovery,
        "errors": {
            str(int(code)): {"name": code.name, "description": doc}
            for code, doc in ERROR_DOCS.items()
        },
        "$defs": defs,
    }


def render_schema() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_schema())
