"""A fuzzer of the daemon's wire: hypothesis strategies for frames, valid-shaped ones drawn from
the committed JSON Schema and mutations of them, and the oracle each answer is held to.

Used by `tests/unit/test_fuzz_wire.py` (a few hundred examples, derandomized) and
`bench/fuzz_wire.py` (as many as asked, with counts).

The client is a plain socket with wsproto reading the daemon's frames, so that frames no
websocket library would send (a text frame that is not UTF-8, a binary frame, a frame larger
than the daemon takes) can be written as they are.

The oracle, for each frame (see `docs/protocol.md`, "Frames"):
- a text frame that is not UTF-8 closes the connection with 1007, a frame larger than the
  daemon's limit with 1009; nothing else closes it;
- a binary frame is answered -32600 with `"id": null`, unread;
- a frame is answered at most once. An answer is a result, or an error whose code is in the
  protocol's error table, and never INTERNAL_ERROR (-32603: the daemon failed);
- a frame with a well-typed `id` (a string or an integer) that is not shaped as a response is
  answered with that id; one with an `id` of another type, or that is not JSON-RPC at all, is
  answered with `"id": null` if at all;
- a notification (a JSON-RPC 2.0 object with a string `method` and no `id`) is not answered;
- after every frame a `daemon/status` request on the same connection (a fresh one after a
  close) is answered, and the daemon process is alive;
- some frames are sent first on a new connection, before `initialize`: then only `initialize`
  (and `$/cancelRequest`) may succeed, and an `initialize` sent after them still works.
"""

import contextlib
import dataclasses
import json
import secrets
import socket
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from tether.protocol.errors import ErrorCode

SCHEMA_PATH = (
    Path(__file__).resolve().parent.parent / "packaging/schema/tether-protocol.schema.json"
)
MAX_MESSAGE_BYTES: int = json.loads(SCHEMA_PATH.read_text())["x-tether-transport"][
    "maxMessageBytes"
]
"""The largest frame the daemon takes."""
ANSWER_TIMEOUT = 20.0
"""Seconds an answer may take (a `session/compact` asks the model)."""
EXCLUDED_METHODS = frozenset({"daemon/shutdown"})
"""Methods a valid-shaped frame never names: a daemon told to stop is right to stop."""
TABLE_CODES = frozenset(int(code) for code in ErrorCode)
BINARY_CODES = frozenset({int(ErrorCode.INVALID_REQUEST)})
"""A binary frame is refused unread."""
NOT_JSON_CODES = frozenset({int(ErrorCode.PARSE_ERROR), int(ErrorCode.INVALID_REQUEST)})
"""What a frame that is not JSON, or not an object, gets."""

JSON = Any


# --------------------------------------------------------------------------------------------
# Frames


@dataclass(frozen=True)
class Frame:
    """One websocket message to send: `payload` as a text (opcode 1) or binary (2) frame."""

    payload: bytes
    kind: str
    """What made it (for counts): `valid`, or the mutation's name."""
    binary: bool = False
    fresh: bool = False
    """Sent first on a new connection, before `initialize`."""

    def describe(self) -> str:
        shown = self.payload[:300]
        more = f" ... ({len(self.payload)} bytes)" if len(self.payload) > 300 else ""
        where = " before initialize" if self.fresh else ""
        return f"{self.kind} {'binary' if self.binary else 'text'} frame{where} {shown!r}{more}"


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, JSON]:
    schema: dict[str, JSON] = json.loads(path.read_text())
    return schema


_REFS: dict[tuple[int, str, int], Any] = {}
"""Strategies of `$ref`s already built (building them anew at every draw is slow)."""


def values_of(schema: Mapping[str, JSON], defs: Mapping[str, JSON], *, depth: int = 0) -> Any:
    """A strategy for JSON values that fit `schema` (the subset tether's schema uses)."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        key = (id(defs), name, depth)
        cached = _REFS.get(key)
        if cached is None:
            cached = _REFS[key] = st.deferred(lambda: values_of(defs[name], defs, depth=depth + 1))
        return cached
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if "anyOf" in schema:
        return st.one_of([values_of(s, defs, depth=depth) for s in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        types = cast(list[str], kind)
        return st.one_of([values_of({**schema, "type": t}, defs, depth=depth) for t in types])
    if kind == "string":
        return st.text(max_size=24)
    if kind == "integer":
        low = schema.get("minimum", -(2**31))
        high = schema.get("maximum", 2**31)
        return st.integers(min_value=low, max_value=high)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if depth > 4:
            return st.just([])
        items = schema.get("items", {})
        return st.lists(values_of(items, defs, depth=depth + 1), max_size=3)
    if kind == "object":
        return _objects(schema, defs, depth)
    return json_values(max_leaves=4)


def _objects(schema: Mapping[str, JSON], defs: Mapping[str, JSON], depth: int) -> Any:
    properties: dict[str, JSON] = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    fixed = {k: _property(k, v, defs, depth) for k, v in properties.items() if k in required}
    optional = (
        {}
        if depth > 4
        else {k: _property(k, v, defs, depth) for k, v in properties.items() if k not in required}
    )
    base = st.fixed_dictionaries(fixed, optional=optional)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and depth <= 4:
        more = st.dictionaries(
            st.text(max_size=8),
            values_of(cast(dict[str, JSON], extra), defs, depth=depth + 1),
            max_size=2,
        )
        return st.tuples(base, more).map(lambda pair: {**pair[1], **pair[0]})
    return base


SESSION_IDS: list[str] = []
"""Ids of real sessions of the daemon under test; `sessionId` values are drawn from them too."""


def _property(name: str, schema: Mapping[str, JSON], defs: Mapping[str, JSON], depth: int) -> Any:
    values = values_of(schema, defs, depth=depth + 1)
    if name == "sessionId":
        return st.one_of(_real_session_ids, values)
    return values


_real_session_ids = st.integers(0, 7).map(
    lambda i: SESSION_IDS[i % len(SESSION_IDS)] if SESSION_IDS else "s_none"
)


def json_values(max_leaves: int = 8) -> Any:
    """Any JSON value, small."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=16),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


REQUEST_IDS = st.one_of(
    st.text(min_size=1, max_size=12).map(lambda s: f"f-{s}"),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=2**64, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-(2**63) - 1),
)
"""Ids the daemon echoes: strings and integers, of any size (JSON sets no limit)."""
ODD_IDS = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
"""Ids of other kinds: null (answered with null) and ones a client may not send."""


_REQUESTS: dict[int, Any] = {}


def valid_requests(schema: Mapping[str, JSON]) -> Any:
    """Requests of every method of the schema (but `EXCLUDED_METHODS`), params that fit it."""
    cached = _REQUESTS.get(id(schema))
    if cached is None:
        cached = _REQUESTS[id(schema)] = _valid_requests(schema)
    return cached


def _valid_requests(schema: Mapping[str, JSON]) -> Any:
    defs: Mapping[str, JSON] = schema["$defs"]
    methods: dict[str, JSON] = dict(schema["methods"])
    per_method = [
        st.fixed_dictionaries(
            {
                "jsonrpc": st.just("2.0"),
                "id": REQUEST_IDS,
                "method": st.just(name),
                "params": values_of(spec["params"], defs),
            }
        )
        for name, spec in sorted(methods.items())
        if name not in EXCLUDED_METHODS
    ]
    return st.one_of(per_method)


def _encode(value: JSON) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")


MUTATIONS = [
    "valid",
    "params wrong type",
    "param wrong type",
    "param missing",
    "param extra",
    "param huge number",
    "params deep nesting",
    "id odd",
    "id absent (notification)",
    "jsonrpc wrong",
    "method wrong",
    "method absent",
    "response shaped",
    "batch",
    "binary",
    "not utf-8 in a string",
    "lone surrogate escape",
    "truncated",
    "trailing garbage",
    "duplicate keys",
    "non-finite number",
]
"""The ways `mutated` makes a frame."""


@st.composite
def mutated(draw: st.DrawFn, schema: Mapping[str, JSON]) -> Frame:
    """A valid request, mutated one way (the frame's `kind` names the way)."""
    kind = draw(st.sampled_from(MUTATIONS))
    request: dict[str, JSON] = draw(valid_requests(schema))
    params = request["params"]
    binary = False
    match kind:
        case "valid":
            pass
        case "params wrong type":
            request["params"] = draw(
                st.one_of(st.lists(json_values(), max_size=2), st.text(), st.integers(), st.none())
            )
        case "param wrong type" if isinstance(params, dict) and params:
            key = draw(st.sampled_from(sorted(cast(dict[str, JSON], params))))
            params[key] = draw(json_values())
        case "param missing" if isinstance(params, dict) and params:
            key = draw(st.sampled_from(sorted(cast(dict[str, JSON], params))))
            del params[key]
        case "param extra" if isinstance(params, dict):
            params[draw(st.text(min_size=1, max_size=10))] = draw(json_values())
        case "param huge number" if isinstance(params, dict):
            names = sorted(cast(dict[str, JSON], params)) or ["x"]
            key = draw(st.one_of(st.sampled_from(names), st.text(max_size=5)))
            params[key] = draw(
                st.sampled_from([2**64, 2**64 - 1, -(2**63) - 1, 10**30, 1e308, -1e308, 2**1000])
            )
        case "params deep nesting":
            depth = draw(st.sampled_from([64, 1000, 5000, 100_000]))
            text = _encode(request).replace(
                b'"params":' + _encode(params), b'"params":' + b"[" * depth + b"]" * depth
            )
            return Frame(text, kind)
        case "id odd":
            request["id"] = draw(ODD_IDS)
        case "id absent (notification)":
            del request["id"]
        case "jsonrpc wrong":
            wrong = draw(st.sampled_from(["1.0", "2", 2.0, 2, None, "", "2.0 "]))
            if draw(st.booleans()):
                del request["jsonrpc"]
            else:
                request["jsonrpc"] = wrong
        case "method wrong":
            request["method"] = draw(
                st.one_of(
                    st.text(max_size=20),
                    st.sampled_from(["initialize", "$/cancelRequest", "session/event", "rpc.x"]),
                    json_values(max_leaves=2),
                )
            )
        case "method absent":
            del request["method"]
        case "response shaped":
            del request["method"]
            del request["params"]
            if draw(st.booleans()):
                request["result"] = draw(json_values())
            else:
                request["error"] = draw(
                    st.one_of(
                        st.fixed_dictionaries({"code": st.integers(), "message": st.text()}),
                        json_values(),
                    )
                )
        case "batch":
            items = draw(st.lists(st.just(request), max_size=3))
            return Frame(_encode(items), kind)
        case "binary":
            binary = True
            if draw(st.booleans()):
                return Frame(draw(st.binary(max_size=64)), kind, binary=True)
        case "not utf-8 in a string":
            return Frame(_encode(request)[:-1] + b',"x":"\xff\xfe"}', kind, binary=True)
        case "lone surrogate escape":
            # Valid UTF-8 text: the surrogate is a JSON escape.
            request["params"] = {"sessionId": "\ud800", "text": "a\udfffb"}
            return Frame(json.dumps(request, ensure_ascii=True).encode(), kind)
        case "truncated":
            text = _encode(request)
            return Frame(text[: draw(st.integers(0, max(0, len(text) - 1)))], kind)
        case "trailing garbage":
            garbage = draw(st.sampled_from([b"x", b"}", b" {}", b"\x00", b",", b"]"]))
            return Frame(_encode(request) + garbage, kind)
        case "duplicate keys":
            return Frame(_encode(request)[:-1] + b',"id":"dup","method":"x"}', kind)
        case "non-finite number":
            literal = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999"]))
            return Frame(_encode(request)[:-1] + b',"n":' + literal + b"}", kind)
        case _:
            kind = "valid"
    return Frame(_encode(request), kind, binary=binary)


@st.composite
def raw_frames(draw: st.DrawFn) -> Frame:
    """Frames that are not JSON-RPC at all."""
    kind = draw(
        st.sampled_from(
            ["not json", "json scalar", "empty", "empty batch", "invalid utf-8 text", "whitespace"]
        )
    )
    match kind:
        case "not json":
            return Frame(draw(st.text(max_size=40)).encode(), kind)
        case "json scalar":
            return Frame(_encode(draw(json_values(max_leaves=1))), kind)
        case "empty":
            return Frame(b"", kind)
        case "empty batch":
            return Frame(b"[]", kind)
        case "invalid utf-8 text":
            good = draw(st.binary(max_size=16)).replace(b"\xff", b"")
            return Frame(good + b"\xff\xfe" + good, kind)
        case _:
            return Frame(b" \t\r\n" * draw(st.integers(1, 5)), kind)


def frames(schema: Mapping[str, JSON]) -> Any:
    return st.one_of(
        mutated(schema),
        raw_frames(),
        mutated(schema).map(lambda frame: dataclasses.replace(frame, fresh=True)),
    )


def _may_succeed_before_initialize(frame: Frame) -> bool:
    """`initialize` itself, and `$/cancelRequest` (answered `{}` whatever it names)."""
    try:
        body = json.loads(frame.payload)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and cast(dict[str, JSON], body).get("method") in (
        "initialize",
        "$/cancelRequest",
    )


def oversize_frame() -> Frame:
    return Frame(b'"' + b"x" * MAX_MESSAGE_BYTES + b'"', "oversize")


# --------------------------------------------------------------------------------------------
# A raw websocket client


class Closed(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(f"closed with {code}")
        self.code = code


class RawClient:
    """A websocket client over a plain socket: wsproto reads the daemon's frames, and frames
    are written as given (masked, as a client must)."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        # A frame and the probe behind it are two small writes: without this, the probe
        # waits for the ACK of an unanswered frame (Nagle and delayed ACKs: 40 ms).
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.closed: int | None = None
        self._messages: list[str | bytes] = []
        self._text: list[str] = []
        self.sock.sendall(
            self.ws.send(
                Request(
                    host=f"127.0.0.1:{port}",
                    target="/",
                    extra_headers=[(b"authorization", f"Bearer {token}".encode())],
                )
            )
        )
        deadline = time.monotonic() + 10
        while True:
            for event in self._pump(deadline):
                if isinstance(event, AcceptConnection):
                    return
                if isinstance(event, RejectConnection):
                    raise ConnectionRefusedError(f"upgrade refused: {event.status_code}")

    def send_frame(self, frame: Frame) -> None:
        opcode = 0x2 if frame.binary else 0x1
        payload = frame.payload
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        mask = secrets.token_bytes(4)
        self.sock.sendall(header + mask + _masked(payload, mask))

    def request(self, request_id: str, method: str, params: JSON = None) -> None:
        body: dict[str, JSON] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        self.send_frame(Frame(_encode(body), "probe"))

    def receive(self, deadline: float) -> dict[str, JSON] | list[JSON] | JSON:
        """The next message, decoded; raises `Closed` once the daemon closed the websocket,
        TimeoutError at `deadline`."""
        while not self._messages:
            if self.closed is not None:
                raise Closed(self.closed)
            for _ in self._pump(deadline):
                pass
        message = self._messages.pop(0)
        return msgspec.json.decode(message)

    def close(self) -> None:
        with contextlib.suppress(OSError, LocalProtocolError):
            if self.closed is None:
                self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        self.sock.close()

    def _pump(self, deadline: float) -> Iterator[object]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            raise
        except OSError:
            data = b""
        if not data:
            self.closed = self.closed or 1006
            self.ws.receive_data(None)
        else:
            self.ws.receive_data(data)
        for event in self.ws.events():
            match event:
                case TextMessage():
                    self._text.append(event.data)
                    if event.message_finished:
                        self._messages.append("".join(self._text))
                        self._text.clear()
                case BytesMessage():
                    raise AssertionError("the daemon sent a binary frame")
                case Ping():
                    self.sock.sendall(self.ws.send(event.response()))
                case CloseConnection():
                    self.closed = event.code
                    with contextlib.suppress(OSError, LocalProtocolError):
                        self.sock.sendall(self.ws.send(event.response()))
                case _:
                    pass
            yield event


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _masked(payload: bytes, mask: bytes) -> bytes:
    if not payload:
        return b""
    repeat = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeat, "big")).to_bytes(
        len(payload), "big"
    )


# --------------------------------------------------------------------------------------------
# The oracle


class Finding(AssertionError):
    """The daemon broke a rule of the wire for a frame."""


@dataclass
class Expectation:
    close_code: int | None = None
    """The websocket must close with this code."""
    answer_id: JSON = None
    """The id the answer must carry (when `must_answer`)."""
    must_answer: bool = False
    may_answer: bool = True
    null_id_only: bool = False
    """An answer, if any, must carry `"id": null`."""
    codes: frozenset[int] = TABLE_CODES
    """The error codes the answer may carry."""
    results: bool = True
    """The answer may be a result (before `initialize`, only `initialize` succeeds)."""


def expectation(frame: Frame) -> Expectation:
    """What the rules of the wire say the daemon does with `frame` (see the module docstring)."""
    if len(frame.payload) > MAX_MESSAGE_BYTES:
        return Expectation(close_code=1009)
    if frame.binary:
        return Expectation(must_answer=True, null_id_only=True, codes=BINARY_CODES)
    try:
        frame.payload.decode("utf-8")
    except UnicodeDecodeError:
        return Expectation(close_code=1007)
    try:
        # Strict JSON: no NaN or Infinity literals. A number too large for a double (1e999)
        # reads as infinity: the daemon may take it or refuse it when it is a member it
        # ignores, and refuses it where it reads it (an `id` then is not well typed).
        value = json.loads(frame.payload, parse_constant=_refuse_constant)
        # A lone surrogate (`"\ud800"`) is JSON by its grammar but no text: the daemon's
        # reader refuses it.
        json.dumps(value, ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        return Expectation(must_answer=True, null_id_only=True, codes=NOT_JSON_CODES)
    if not isinstance(value, dict):
        return Expectation(must_answer=True, null_id_only=True, codes=NOT_JSON_CODES)
    body = cast(dict[str, JSON], value)
    response_shaped = "method" not in body and ("result" in body or "error" in body)
    if "id" not in body:
        notification = body.get("jsonrpc") == "2.0" and isinstance(body.get("method"), str)
        return Expectation(may_answer=not notification, null_id_only=True)
    request_id = body["id"]
    well_typed = isinstance(request_id, str) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    )
    if response_shaped:
        return Expectation(answer_id=request_id if well_typed else None)
    if well_typed or request_id is None:
        return Expectation(answer_id=request_id, must_answer=True)
    return Expectation(null_id_only=True)


@dataclass
class Tally:
    """Counts of what the fuzzer sent and what came back."""

    kinds: dict[str, int] = field(default_factory=dict[str, int])
    outcomes: dict[str, int] = field(default_factory=dict[str, int])
    codes: dict[int, int] = field(default_factory=dict[int, int])
    findings: list[str] = field(default_factory=list[str])

    def count(self, table: dict[Any, int], key: object) -> None:
        table[key] = table.get(key, 0) + 1


class Fuzzer:
    """Sends frames to one daemon over one connection (a new one after a close) and holds each
    answer to the oracle; `check(frame)` raises `Finding` on a broken rule."""

    def __init__(self, port: int, token: str, pid: int, alive: Callable[[], bool]) -> None:
        self.port = port
        self.token = token
        self.pid = pid
        self.alive = alive
        self.tally = Tally()
        self._probes = 0
        self.client = self._connect()

    def _connect(self) -> RawClient:
        client = RawClient(self.port, self.token)
        client.request("init", "initialize", {"clientName": "wire-fuzz"})
        answer = self._wait_for(client, "init", time.monotonic() + ANSWER_TIMEOUT)
        if "result" not in answer:
            raise Finding(f"initialize failed: {answer}")
        return client

    def close(self) -> None:
        self.client.close()

    def check(self, frame: Frame) -> None:
        tally = self.tally
        tally.count(tally.kinds, frame.kind + (" (before initialize)" if frame.fresh else ""))
        expect = expectation(frame)
        if not frame.fresh:
            try:
                self._exchange(self.client, frame, expect)
            except Finding:
                if self.client.closed is not None or not self._usable():
                    self._reconnect()
                raise
            return
        if not _may_succeed_before_initialize(frame):
            expect.results = False
        client = RawClient(self.port, self.token)
        try:
            self._exchange(client, frame, expect)
        finally:
            client.close()

    def _exchange(self, client: RawClient, frame: Frame, expect: "Expectation") -> None:
        try:
            client.send_frame(frame)
        except OSError as exc:
            raise Finding(f"the connection broke on sending {frame.describe()}: {exc}") from exc
        self._probes += 1
        probe = f"probe-{self._probes}"
        if expect.close_code is not None:
            self._expect_close(client, frame, expect.close_code)
            return
        init = f"init-{self._probes}"
        try:
            if frame.fresh:
                client.request(init, "initialize", {"clientName": "wire-fuzz"})
            client.request(probe, "daemon/status")
        except OSError as exc:
            raise Finding(f"the connection broke after {frame.describe()}: {exc}") from exc
        deadline = time.monotonic() + ANSWER_TIMEOUT
        answers: list[dict[str, JSON]] = []
        probe_answered = False
        while not probe_answered or (expect.must_answer and not answers):
            try:
                message = client.receive(deadline)
            except Closed as exc:
                raise Finding(f"closed with {exc.code} after {frame.describe()}") from exc
            except TimeoutError as exc:
                waiting = "the probe" if not probe_answered else "the answer"
                raise Finding(f"no answer to {waiting} after {frame.describe()}") from exc
            if not isinstance(message, dict):
                raise Finding(f"the daemon sent a non-object {message!r}")
            body = cast(dict[str, JSON], message)
            if "method" in body:
                continue  # a notification of the daemon's (events of an attached session)
            if frame.fresh and body.get("id") == init:
                continue  # ALREADY_INITIALIZED when the frame was an `initialize`
            if body.get("id") == probe and not probe_answered:
                probe_answered = True
                if "result" not in body:
                    raise Finding(f"the probe failed after {frame.describe()}: {body}")
                continue
            answers.append(body)
        if not self.alive():
            raise Finding(f"the daemon (pid {self.pid}) died after {frame.describe()}")
        self._judge(frame, expect, answers)

    def _judge(self, frame: Frame, expect: Expectation, answers: list[dict[str, JSON]]) -> None:
        tally = self.tally
        if not answers:
            if expect.must_answer:
                raise Finding(f"no answer to {frame.describe()}")
            tally.count(tally.outcomes, "no answer")
            return
        if len(answers) > 1:
            raise Finding(f"{len(answers)} answers to {frame.describe()}: {answers}")
        if not expect.may_answer:
            raise Finding(f"a notification was answered: {frame.describe()} -> {answers[0]}")
        answer = answers[0]
        if answer.get("jsonrpc") != "2.0":
            raise Finding(f"an answer that is not JSON-RPC 2.0: {answer}")
        if expect.null_id_only and answer.get("id") is not None:
            raise Finding(f"answered with id {answer.get('id')!r}, not null: {frame.describe()}")
        if not expect.null_id_only and answer.get("id") != expect.answer_id:
            raise Finding(
                f"answered with id {answer.get('id')!r}, not {expect.answer_id!r}:"
                f" {frame.describe()}"
            )
        if "result" in answer and "error" not in answer:
            if expect.codes is not TABLE_CODES or not expect.results:
                raise Finding(f"a result {answer} for {frame.describe()}")
            tally.count(tally.outcomes, "result")
            return
        error = answer.get("error")
        code: JSON = cast(dict[str, JSON], error).get("code") if isinstance(error, dict) else None
        if not isinstance(code, int) or code not in TABLE_CODES:
            raise Finding(f"an untyped answer {answer} to {frame.describe()}")
        if code not in expect.codes:
            raise Finding(f"error {code} is not one of {sorted(expect.codes)}: {frame.describe()}")
        if code == ErrorCode.INTERNAL_ERROR:
            raise Finding(f"an internal error {answer} for {frame.describe()}")
        tally.count(tally.outcomes, "error")
        tally.count(tally.codes, code)

    def _expect_close(self, client: RawClient, frame: Frame, code: int) -> None:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        try:
            while True:
                client.receive(deadline)
        except Closed as exc:
            if exc.code != code:
                raise Finding(f"closed with {exc.code}, not {code}, by {frame.describe()}") from exc
        except TimeoutError as exc:
            raise Finding(f"not closed with {code} by {frame.describe()}") from exc
        self.tally.count(self.tally.outcomes, f"closed {code}")
        if not self.alive():
            raise Finding(f"the daemon (pid {self.pid}) died after {frame.describe()}")
        if client is self.client:
            self._reconnect()

    def _usable(self) -> bool:
        """Whether the connection still answers (after a finding, before the next frame)."""
        self._probes += 1
        request_id = f"usable-{self._probes}"
        try:
            self.client.request(request_id, "daemon/status")
            self._wait_for(self.client, request_id, time.monotonic() + ANSWER_TIMEOUT)
        except (OSError, Closed, TimeoutError):
            return False
        return True

    def _reconnect(self) -> None:
        self.client.close()
        self.client = self._connect()

    def _wait_for(self, client: RawClient, request_id: str, deadline: float) -> dict[str, JSON]:
        while True:
            message = client.receive(deadline)
            if isinstance(message, dict) and message.get("id") == request_id:
                return cast(dict[str, JSON], message)


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
