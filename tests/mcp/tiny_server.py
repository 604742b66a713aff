"""A small MCP server over stdio, standard library only, for the tests of tether's MCP client.

Tools: `echo` {text}, `add` {a, b: integers}, `look` (read-only, returns an image and a
resource link), `fail` (an `isError` result), `crash` (exits while answering), `hang` (never
answers). With `--log PATH` every message received is appended to PATH as a JSON line, so a
test can tell what reached the server. `--crash-at-start` exits before the handshake.
"""

import json
import os
import sys

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
        return {
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"},
            ]
        }
    if name == "fail":
        return {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    if name == "crash":
        os._exit(3)
    return None  # hang: no answer


def main() -> None:
    log = sys.argv[sys.argv.index("--log") + 1] if "--log" in sys.argv else ""
    if "--crash-at-start" in sys.argv:
        sys.exit(2)
    print("a banner line that is not JSON", flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        if log:
            with open(log, "a") as handle:
                handle.write(json.dumps(message) + "\n")
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
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


if __name__ == "__main__":
    main()
