"""A small MCP server over stdio, standard library only, for the tests of tether's MCP client.

Tools: `echo` {text}, `add` {a, b: integers}, `look` (read-only, returns an image and a
resource link; {path, mimeType, count, data}: `count` copies of the file at `path`, or of
the base64 `data`, as image blocks of `mimeType`, instead of a PNG signature alone), `fail`
(an `isError` result), `crash` (exits while answering), `hang` (never
answers). With `--log PATH` every message received is appended to PATH as a JSON line, so a
test can tell what reached the server. `--crash-at-start` exits before the handshake.

The revision it speaks: 2025-11-25 by default, answering `server/discover` (a method it
does not know) with -32601; with `--silent-probe` it does not answer it at all, like
servers that ignore every request before `initialize`. `--modern` makes it a 2026-07-28
server: no `initialize`, `server/discover` answered, every request's `_meta` checked
(-32022 naming `--supported V,…` for a revision it does not take, -32602 for a request
without it), `--ttl MS` as the freshness of `tools/list`, and a tool `ask` that answers by
asking for input (`resultType: input_required`) and a tool `grow` that adds a tool
`grown`, announced on the `subscriptions/listen` streams open. A modern one that `--supported` lists
2025-11-25 takes the handshake too; `--slow-discover` answers the first `server/discover`
late, like a server still starting: only once the next message has come (the client's
`notifications/cancelled`, once its wait for the answer has passed).
"""

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

TOOLS = [
    {
        "name": "echo",
        "description": "Say the text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 50}},
            "required": ["text"],
            "additionalProperties": False,
        },
    },
    {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "look",
        "description": "A picture and a link.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
]
ASK = {"name": "ask", "description": "Asks for input.", "inputSchema": {"type": "object"}}
GROW = {"name": "grow", "description": "Adds a tool.", "inputSchema": {"type": "object"}}
LISTENING: list[object] = []
"""The ids of the `subscriptions/listen` requests open (2026-07-28)."""
HELD: list[dict[str, Any]] = []
"""With `--slow-discover`, the first `server/discover`, until the next message comes."""


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}]}


def call(name: str, arguments: dict[str, object]) -> dict[str, object] | None:
    if name == "echo":
        return text(f"echo: {arguments['text']}")
    if name == "add":
        return text(str(int(arguments["a"]) + int(arguments["b"])))  # type: ignore[arg-type]
    if name == "look":
        data = str(arguments.get("data", "iVBORw0KGgo="))
        if "path" in arguments:
            data = base64.b64encode(Path(str(arguments["path"])).read_bytes()).decode()
        mime = str(arguments.get("mimeType", "image/png"))
        count = int(arguments.get("count", 1))  # type: ignore[arg-type]
        return {
            "content": [
                {"type": "text", "text": "here"},
                *({"type": "image", "data": data, "mimeType": mime} for _ in range(count)),
                {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"},
            ]
        }
    if name == "fail":
        return {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    if name == "crash":
        os._exit(3)
    return None  # hang: no answer


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def refusal(message: dict[str, Any], supported: list[str]) -> dict[str, object] | None:
    """The error a 2026-07-28 server answers a request with whose `_meta` it cannot take."""
    meta: dict[str, Any] = message.get("params", {}).get("_meta") or {}
    version = meta.get("io.modelcontextprotocol/protocolVersion")
    if not isinstance(version, str) or "io.modelcontextprotocol/clientCapabilities" not in meta:
        return {"code": -32602, "message": "params._meta must carry the revision"}
    if version not in supported:
        data = {"supported": supported, "requested": version}
        return {"code": -32022, "message": "Unsupported protocol version", "data": data}
    return None


def main() -> None:
    log = option("--log", "")
    modern = "--modern" in sys.argv
    supported = option("--supported", "2026-07-28").split(",")
    ttl = int(option("--ttl", "60000"))
    if "--crash-at-start" in sys.argv:
        sys.exit(2)
    print("a banner line that is not JSON", flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        if log:
            with open(log, "a") as handle:
                handle.write(json.dumps(message) + "\n")
        if HELD:  # the client has moved on: the late answer to the first `server/discover`
            serve_modern(HELD.pop(), supported, ttl)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue
        if method == "initialize" and "2025-11-25" in supported:
            modern = False  # a server of both revisions: this client chose the handshake
        if modern:
            serve_modern(message, supported, ttl)
        elif method == "server/discover" and "--silent-probe" in sys.argv:
            continue
        elif method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {"listChanged": True}},
                        "serverInfo": {"name": "tiny", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            params = message["params"]
            result = call(params["name"], params.get("arguments", {}))
            if result is not None:
                send({"jsonrpc": "2.0", "id": ident, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": method}})


def serve_modern(message: dict[str, Any], supported: list[str], ttl: int) -> None:
    method, ident = message.get("method"), message.get("id")
    error = refusal(message, supported)
    if error is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": error})
        return
    done = {"resultType": "complete"}
    if method == "server/discover":
        if "--slow-discover" in sys.argv:
            sys.argv.remove("--slow-discover")  # only the first: a server still starting
            HELD.append(message)
            return
        result: dict[str, object] | None = {
            **done,
            "supportedVersions": supported,
            "capabilities": {"tools": {"listChanged": True}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tiny", "version": "2"}},
            "ttlMs": 0,
            "cacheScope": "public",
        }
    elif method == "tools/list":
        result = {**done, "tools": [*TOOLS, ASK, GROW], "ttlMs": ttl, "cacheScope": "public"}
    elif method == "subscriptions/listen":
        LISTENING.append(ident)
        ack = {"_meta": {"io.modelcontextprotocol/subscriptionId": ident}, "notifications": {}}
        ack["notifications"] = message["params"]["notifications"]
        send(
            {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack}
        )
        return
    elif method == "tools/call":
        params: dict[str, Any] = message["params"]
        if params["name"] == "ask":
            result = {"resultType": "input_required", "inputRequests": {}}
        elif params["name"] == "grow":
            TOOLS.append(
                {"name": "grown", "description": "New.", "inputSchema": {"type": "object"}}
            )
            for subscription in LISTENING:  # announced before the call's answer
                meta = {"io.modelcontextprotocol/subscriptionId": subscription}
                changed = {"method": "notifications/tools/list_changed", "params": {"_meta": meta}}
                send({"jsonrpc": "2.0", **changed})
            result = {**done, "content": []}
        else:
            result = call(params["name"], params.get("arguments", {}))
            result = None if result is None else {**done, **result}
    else:
        error = {"code": -32601, "message": f"{method}"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})
        return
    if result is not None:
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
