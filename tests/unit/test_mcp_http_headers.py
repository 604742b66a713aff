"""What a 2026-07-28 request over streamable HTTP carries besides its body: the revision,
method and target headers, the `Mcp-Param-*` values a tool's schema marks with
`x-mcp-header` (encoded when not plain ASCII), no session; a tool whose markings break the
rules left out; a revision refused with HTTP 400 and -32022 read as the server's answer.
The server is a real HTTP server on 127.0.0.1 (the standard library's, in a thread) that
records what reached it."""

import json
import threading
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.headers import header_value, mirrored_params, param_headers
from tether.daemon.mcp.pool import McpPool

MARKED = {
    "name": "query",
    "inputSchema": {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "where": {
                "type": "object",
                "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}},
            },
            "sql": {"type": "string"},
        },
    },
}
BROKEN = {
    "name": "broken",
    "inputSchema": {
        "type": "object",
        "properties": {"ratio": {"type": "number", "x-mcp-header": "Ratio"}},
    },
}


class Recorded:
    def __init__(self, supported: list[str]) -> None:
        self.supported = supported
        self.requests: list[tuple[dict[str, str], dict[str, object]]] = []


def handler_for(recorded: Recorded) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            headers = {name.lower(): value for name, value in self.headers.items()}
            recorded.requests.append((headers, body))
            version = headers.get("mcp-protocol-version", "")
            if version not in recorded.supported:
                data = {"supported": recorded.supported, "requested": version}
                error = {"code": -32022, "message": "Unsupported protocol version", "data": data}
                self.answer(400, {"jsonrpc": "2.0", "id": body["id"], "error": error})
                return
            done: dict[str, object] = {"resultType": "complete"}
            results: dict[str, dict[str, object]] = {
                "server/discover": {**done, "supportedVersions": recorded.supported},
                "tools/list": {**done, "tools": [MARKED, BROKEN], "ttlMs": 60000},
                "tools/call": {**done, "content": [{"type": "text", "text": "ok"}]},
            }
            self.answer(
                200, {"jsonrpc": "2.0", "id": body["id"], "result": results[body["method"]]}
            )

        def answer(self, status: int, message: dict[str, object]) -> None:
            data = json.dumps(message).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def http_server(recorded: Recorded) -> Generator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(recorded))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


@asynccontextmanager
async def pool_at(url: str, tmp_path: Path) -> AsyncGenerator[McpPool]:
    pool = McpPool(tmp_path, backoff=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        pool.configure([ServerDefinition(name="h", source="user", config=McpServerConfig(url=url))])
        await pool.ensure_started()
        yield pool
        nursery.cancel_scope.cancel()


async def test_a_call_mirrors_its_method_name_and_marked_arguments(tmp_path: Path) -> None:
    recorded = Recorded(["2026-07-28"])
    arguments: dict[str, object] = {
        "region": "Hello, 世界",
        "limit": 42,
        "where": {"zone": "eu-1"},
        "sql": "x",
    }
    with http_server(recorded) as url, trio.fail_after(20):
        async with pool_at(url, tmp_path) as pool:
            offered = [tool.name for _, tool in pool.offered()]
            await pool.call("h", "query", arguments)
            status = pool.status()[0]
    assert offered == ["query"]  # `broken` marks a number: left out, the others kept
    assert status.revision == "2026-07-28"
    methods = [body["method"] for _, body in recorded.requests]
    assert methods == ["server/discover", "tools/list", "tools/call"]
    for headers, body in recorded.requests:
        assert headers["mcp-protocol-version"] == "2026-07-28"
        assert headers["mcp-method"] == body["method"]
        assert "mcp-session-id" not in headers
    call_headers = recorded.requests[-1][0]
    assert call_headers["mcp-name"] == "query"
    assert call_headers["mcp-param-region"] == "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert call_headers["mcp-param-limit"] == "42"
    assert call_headers["mcp-param-zone"] == "eu-1"
    assert not any(name.startswith("mcp-param-sql") for name in call_headers)
    assert "mcp-name" not in recorded.requests[1][0]  # tools/list names nothing


async def test_a_400_refusing_the_revision_is_the_servers_answer(tmp_path: Path) -> None:
    """A -32022 naming only revisions tether lacks: refused with the server's list, no
    fallback to the handshake (the server said it is not an older one)."""
    recorded = Recorded(["2099-01-01"])
    with http_server(recorded) as url, trio.fail_after(20):
        async with pool_at(url, tmp_path) as pool:
            status = pool.status()[0]
    assert status.state != "running"
    assert "speaks MCP 2099-01-01, which tether does not" in status.last_error
    assert {body["method"] for _, body in recorded.requests} == {"server/discover"}


def test_header_values_are_plain_or_base64() -> None:
    assert header_value("us-west1") == "us-west1"
    assert header_value("Hello, 世界") == "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert header_value(" padded ") == "=?base64?IHBhZGRlZCA=?="
    assert header_value("line1\nline2") == "=?base64?bGluZTEKbGluZTI=?="
    assert header_value("=?base64?literal?=") == "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="


def test_marked_values_become_headers_and_absent_ones_none() -> None:
    paths = mirrored_params(MARKED["inputSchema"])
    assert paths == {"Region": ("region",), "Limit": ("limit",), "Zone": ("where", "zone")}
    assert param_headers(paths, {"region": "r", "limit": True, "where": None}) == {
        "Mcp-Param-Region": "r",
        "Mcp-Param-Limit": "true",
    }
    assert param_headers(paths, {"limit": 2.0}) == {"Mcp-Param-Limit": "2"}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}, "not a string"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}, "not an HTTP header"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}, "not an HTTP header"),
        (
            {
                "properties": {
                    "a": {"type": "string", "x-mcp-header": "X"},
                    "b": {"type": "string", "x-mcp-header": "x"},
                }
            },
            "used twice",
        ),
        (
            {
                "properties": {
                    "a": {"type": "array", "items": {"type": "string", "x-mcp-header": "I"}}
                }
            },
            "not reached by properties alone",
        ),
        (
            {"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},
            "not reached",
        ),
        ({"type": "string", "x-mcp-header": "Root"}, "not reached"),
    ],
)
def test_markings_that_break_the_rules_are_refused(schema: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        mirrored_params(schema)
