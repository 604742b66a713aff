"""The HTTP request handler: routes, the model dialects, streaming and its faults.

``POST /v1/chat/completions`` answers in the OpenAI dialect, ``POST /v1/messages`` in the
Anthropic one, each after `tether.testing.checks` has passed the request (a refused one is
recorded and answered 400, consuming no step); each consumes the next
step of the script. A step's ``drop_after_chunks`` ends the connection mid-body and
``malformed_after_chunks`` slips in one ``data:`` line that is not JSON. Streamed bodies are
sent chunked, one SSE frame per HTTP chunk.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol, cast

from tether.testing import anthropic, checks, openai, reply
from tether.testing.script import JSONObject, PageSpec, Step, parse_script, type_name
from tether.testing.state import ServerState

ANTHROPIC = "anthropic"
OPENAI = "openai"

MALFORMED_LINE = b'data: {"choices": [{"delta": {"content": "unfinished\n\n'
"""What ``malformed_after_chunks`` sends: a ``data:`` line cut inside its JSON."""


class _Served(Protocol):
    state: ServerState


def encode(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def peer_closed(connection: socket.socket) -> bool:
    """Whether the other end has closed `connection`: something can be read at once, and it
    is the end (bytes of a next request mean the sender still listens). Polled first, so it
    never waits, whatever timeout the socket has."""
    poller = select.poll()
    poller.register(connection, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset by the peer
        return True


class Handler(BaseHTTPRequestHandler):
    """One connection's requests: routing, the model dialects and the introspection
    endpoints."""

    protocol_version = "HTTP/1.1"
    server_version = "TetherModelServer/1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    @property
    def _state(self) -> ServerState:
        return cast(_Served, self.server).state

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # ---- plumbing

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length", "0") or "0")
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _send_json(
        self, status: int, payload: object, headers: Mapping[str, str] | None = None
    ) -> None:
        data = encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error_json(self, status: int, message: str, error_type: str) -> None:
        self._send_json(status, openai.error_body(message, error_type))

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _request_headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    # ---- routing

    def do_GET(self) -> None:
        path = self._path()
        if path == "/v1/models":
            model = self._state.script.model
            if "anthropic-version" in self.headers:
                entry = {"id": model, "type": "model", "display_name": model}
                listing: JSONObject = {
                    "data": [entry],
                    "has_more": False,
                    "first_id": model,
                    "last_id": model,
                }
            else:
                entry = {"id": model, "object": "model", "owned_by": "tether"}
                listing = {"object": "list", "data": [entry]}
            self._send_json(200, listing)
        elif path == "/_tether/requests":
            self._send_json(200, self._state.recorded())
        elif path == "/_tether/headers":
            self._send_json(200, self._state.recorded_headers())
        elif path == "/_tether/health":
            self._send_json(200, {"ok": True})
        else:
            self._not_found("GET", path)

    def do_POST(self) -> None:
        path = self._path()
        try:
            raw = self._read_body()
        except ValueError:
            self.close_connection = True
            self._send_error_json(400, "malformed request body framing", "invalid_request_error")
            return
        if path == "/v1/chat/completions":
            self._chat_completions(raw)
        elif path == "/v1/messages":
            self._messages(raw)
        elif path == "/_tether/script":
            self._replace_script(raw)
        elif path == "/_tether/release":
            self._state.release()
            self._send_json(200, {"ok": True})
        else:
            self._not_found("POST", path)

    def _not_found(self, method: str, path: str) -> None:
        self._send_error_json(404, f"no route for {method} {path}", "invalid_request_error")

    def _parse_json_object(self, raw: bytes) -> JSONObject | None:
        try:
            body: object = json.loads(raw)
        except ValueError as exc:
            self._send_error_json(400, f"invalid JSON body: {exc}", "invalid_request_error")
            return None
        if not isinstance(body, dict):
            message = f"request body must be a JSON object, got {type_name(body)}"
            self._send_error_json(400, message, "invalid_request_error")
            return None
        return cast(JSONObject, body)

    def _replace_script(self, raw: bytes) -> None:
        data = self._parse_json_object(raw)
        if data is None:
            return
        try:
            script = parse_script(data)
        except ValueError as exc:
            self._send_error_json(400, str(exc), "invalid_request_error")
            return
        self._state.set_script(script)
        self._send_json(200, {"ok": True, "steps": len(script.steps)})

    # ---- model requests

    def _chat_completions(self, raw: bytes) -> None:
        body = self._parse_json_object(raw)
        if body is None:
            return
        problem = checks.openai_request_problem(body)
        if problem is not None:
            self._state.record(body, self._request_headers())
            self._send_error_json(400, problem, "invalid_request_error")
            return
        self._answer(body, OPENAI)

    def _messages(self, raw: bytes) -> None:
        try:
            data: object = json.loads(raw)
        except ValueError as exc:
            self._send_json(
                400, anthropic.error_body(f"invalid JSON body: {exc}", "invalid_request_error")
            )
            return
        body = cast(JSONObject, data) if isinstance(data, dict) else None
        problem = (
            "request body must be a JSON object"
            if body is None
            else checks.anthropic_request_problem(body)
        )
        if problem is not None:
            self._state.record(
                body if body is not None else {"invalid": data}, self._request_headers()
            )
            self._send_json(400, anthropic.error_body(problem, "invalid_request_error"))
            return
        assert body is not None
        self._answer(body, ANTHROPIC)

    def _answer(self, body: JSONObject, dialect: str) -> None:
        state = self._state
        if state.script.tool_support == "none" and body.get("tools"):
            # Like a model without tool support: refused, and the step stays for the retry.
            state.record(body, self._request_headers())
            model = body.get("model")
            name = model if isinstance(model, str) and model else state.script.model
            refusal = (
                anthropic.tools_unsupported_body
                if dialect == ANTHROPIC
                else openai.tools_unsupported_body
            )
            self._send_json(400, refusal(name))
            return
        claim = state.take(body, self._request_headers(), lambda: peer_closed(self.connection))
        if claim is None:
            self.close_connection = True
            return
        ordinal, step, script = claim
        if step is None:
            message = f"model script exhausted after {len(script.steps)} steps"
            if dialect == ANTHROPIC:
                self._send_json(500, anthropic.error_body(message, "api_error"))
            else:
                self._send_error_json(500, message, "server_error")
            return
        if not state.sleep_ms(step.delay_ms):
            self.close_connection = True
            return
        if step.error is not None:
            error = step.error
            headers = {"Retry-After": error.retry_after} if error.retry_after is not None else {}
            error_of = anthropic.step_error_body if dialect == ANTHROPIC else openai.step_error_body
            self._send_json(error.status, error_of(error), headers)
            return
        if step.page is not None:
            self._send_page(step.page)
            return
        if script.tool_support == "none":
            step = reply.text_tool_step(step)
        created = int(time.time())
        streamed = body.get("stream") is True
        try:
            if dialect == ANTHROPIC and streamed:
                events = anthropic.events(step, ordinal, script.model, body)
                frames = [
                    b"event: %s\ndata: %s\n\n" % (str(e["type"]).encode(), encode(e))
                    for e in events
                ]
                self._stream(step, frames)
            elif dialect == ANTHROPIC:
                self._respond_whole(
                    step, encode(anthropic.message(step, ordinal, script.model, body))
                )
            elif streamed:
                events = openai.stream_events(step, ordinal, script.model, body, created)
                frames = [b"data: " + encode(e) + b"\n\n" for e in events]
                self._stream(step, frames, b"data: [DONE]\n\n")
            else:
                completion = openai.completion(step, ordinal, script.model, body, created)
                self._respond_whole(step, encode(completion))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_page(self, page: PageSpec) -> None:
        data = page.body.encode()
        self.send_response(200)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _respond_whole(self, step: Step, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if step.drop_after_chunks is None:
            self.wfile.write(data)
            return
        self.wfile.write(data[: len(data) // 2])
        self._drop()

    def _stream(self, step: Step, frames: list[bytes], final: bytes = b"") -> None:
        """Send each SSE frame as an HTTP chunk (honouring drop_after_chunks and
        chunk_delay_ms), then `final`, then the end of the body."""
        state = self._state
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        limit = step.drop_after_chunks
        for sent, frame in enumerate(frames):
            if limit is not None and sent >= limit:
                self._drop()
                return
            if sent in step.hold_at_chunks:
                self.wfile.flush()
                if not state.wait_released(step.hold_at_chunks.index(sent)):
                    self._drop()
                    return
            if sent and not state.sleep_ms(step.chunk_delay_ms):
                self._drop()
                return
            if sent == step.malformed_after_chunks:
                self._write_chunk(MALFORMED_LINE)
            self._write_chunk(frame)
        if step.malformed_after_chunks is not None and step.malformed_after_chunks >= len(frames):
            self._write_chunk(MALFORMED_LINE)
        if limit is not None:
            self._drop()
            return
        if final:
            self._write_chunk(final)
        self.wfile.write(b"0\r\n\r\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _drop(self) -> None:
        """End the connection mid-response, without completing the body."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
