"""The published schema is enough to write a client from: every definition and timestamp is
described, unions and the top say what to do with the unknown, the transport facts are the
daemon's own numbers, and each method's error codes are the ones its handler can raise."""

import ast
import functools
import inspect
from collections.abc import Iterator
from pathlib import Path

import msgspec

from tests.inprocess import Recorder, bare_session
from tether.daemon.rpc import connection, outbox, websocket
from tether.daemon.rpc.handlers import Handlers
from tether.daemon.server import daemon
from tether.daemon.sessions import replay
from tether.daemon.sessions.store import Store
from tether.protocol import methods, transport
from tether.protocol.error_data import ERROR_DATA
from tether.protocol.errors import GENERIC_ERRORS, ErrorCode
from tether.protocol.events import (
    EPHEMERAL_EVENTS,
    ItemDelta,
    ItemStarted,
    TurnStarted,
)
from tether.protocol.items import AgentMessage
from tether.protocol.methods import METHODS
from tether.protocol.schema import SCHEMA_ID, build_schema
from tether.protocol.session import Cursor
from tether.protocol.version import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[2]
DAEMON = ROOT / "daemon"
PROTOCOL_DOC = ROOT / "docs" / "protocol.md"

Schema = dict[str, object]


def _schema() -> dict[str, object]:
    return msgspec.json.decode(msgspec.json.encode(build_schema()))


def _section(key: str) -> dict[str, Schema]:
    section = _schema()[key]
    assert isinstance(section, dict)
    return section  # pyright: ignore[reportUnknownVariableType]


def _defs() -> dict[str, Schema]:
    return _section("$defs")


def _properties(definition: Schema) -> dict[str, Schema]:
    properties = definition.get("properties", {})
    assert isinstance(properties, dict)
    return properties  # pyright: ignore[reportUnknownVariableType]


# --- descriptions ------------------------------------------------------------------------------


def test_every_definition_says_what_it_means() -> None:
    undescribed = [name for name, d in _defs().items() if not d.get("description")]
    assert not undescribed, f"add a class docstring to {undescribed}"


def test_every_timestamp_says_its_unit() -> None:
    unitless = [
        f"{name}.{field}"
        for name, definition in _defs().items()
        for field, prop in _properties(definition).items()
        if field.endswith("At") and "seconds since the unix epoch" not in str(prop).lower()
    ]
    assert not unitless


def test_field_docstrings_reach_the_schema() -> None:
    item = _properties(_defs()["ToolCall"])["exitCode"]
    assert "negative when a signal ended it" in str(item["description"])
    # Inherited fields carry the base's docstring.
    assert "Stable for the item's lifetime" in str(_properties(_defs()["Notice"])["id"])


def test_the_schema_states_forward_compatibility_and_has_an_id() -> None:
    schema = _schema()
    assert (
        schema["$id"] == SCHEMA_ID == f"https://tether.dev/schema/protocol/v{PROTOCOL_VERSION}.json"
    )
    top = str(schema["description"])
    assert "ignores fields, event types, item types and enum values it does not know" in top
    unions = [
        (name, field, prop)
        for name, definition in _defs().items()
        for field, prop in _properties(definition).items()
        if "discriminator" in prop or "discriminator" in str(prop.get("items", ""))
    ]
    assert {(n, f) for n, f, _ in unions} >= {
        ("SessionEventParams", "event"),
        ("ItemStarted", "item"),
        ("ItemCompleted", "item"),
        ("TurnSnapshot", "items"),
    }
    for name, field, prop in unions:
        assert "skip one whose `type` you do not know" in str(prop["description"]), (name, field)


def test_the_events_never_persisted_say_so() -> None:
    defs = _defs()
    text = PROTOCOL_DOC.read_text()
    for event in EPHEMERAL_EVENTS:
        assert "Never persisted" in str(defs[event.__name__]["description"]), event
        tag = event.__struct_config__.tag
        assert f"`{tag}`" in text, f"docs/protocol.md does not name {tag}"


# --- enums -------------------------------------------------------------------------------------


def _enum(definition: str, field: str) -> set[str]:
    prop = _properties(_defs()[definition])[field]
    values = prop.get("enum")
    assert isinstance(values, list), prop
    return set(values)  # pyright: ignore[reportUnknownArgumentType]


def test_fixed_sets_are_enums() -> None:
    ended = {"completed", "failed", "cancelled", "interrupted", "paused"}
    assert _enum("TurnCompleted", "status") == ended  # a completed turn is not `running`
    assert _enum("TurnSummary", "stopReason") == ended
    assert {"model_unreachable", "config_invalid", "interrupted"} <= _enum("TurnError", "code")
    assert {"step_budget", "compaction_failed", "workspace_config"} <= _enum("Notice", "code")
    assert _enum("DaemonEventParams", "kind") == {
        "lsp/crashed",
        "lsp/restarted",
        "store/write_failed",
        "mcp/crashed",
        "mcp/restarted",
        "mcp/recovered",
        "mcp/failed",
    }
    assert _enum("Compaction", "step") == {"earlier_turns", "old_tool_results", "summary"}
    assert _enum("Compaction", "trigger") == {"auto", "manual"}


# --- transport ---------------------------------------------------------------------------------


def test_the_published_transport_is_what_the_daemon_does() -> None:
    assert transport.MAX_MESSAGE_BYTES == daemon.MAX_MESSAGE_BYTES
    assert transport.PING_INTERVAL_SECONDS == connection.PING_INTERVAL
    assert transport.PING_TIMEOUT_SECONDS == connection.PING_TIMEOUT
    assert transport.MERGED_DELTA_BYTES == outbox.MAX_MERGED_BYTES
    assert transport.CLIENT_BUFFER_BYTES == outbox.DEFAULT_MAX_BYTES
    assert transport.RESYNC_RESERVE_BYTES == outbox.DEFAULT_RESERVE
    assert transport.REPLAY_RING_BYTES == replay.DEFAULT_RING_BYTES
    timeout = inspect.signature(websocket.serve_websocket).parameters["handshake_timeout"]
    assert timeout.default == transport.HANDSHAKE_TIMEOUT_SECONDS
    assert f'"{transport.HOST}"' in inspect.getsource(daemon.Daemon)
    assert {connection.OVERRUN_CLOSE_CODE, websocket._MESSAGE_TOO_BIG} <= set(transport.CLOSE_CODES)
    published = _schema()["x-tether-transport"]
    assert isinstance(published, dict)
    assert published["maxMessageBytes"] == transport.MAX_MESSAGE_BYTES
    assert published["replayRingBytes"] == transport.REPLAY_RING_BYTES


# --- attach ------------------------------------------------------------------------------------


async def test_an_attach_result_has_a_snapshot_exactly_in_snapshot_mode(
    sqlite_store: Store,
) -> None:
    session = bare_session(sqlite_store)
    session.emit(TurnStarted(turn_id="t_1", started_at=1.0))
    session.emit(ItemStarted(turn_id="t_1", item=AgentMessage(id="m_1", step=1)))
    for _ in range(3):
        session.emit(ItemDelta(turn_id="t_1", item_id="m_1", delta="x"))
    cursors = [
        None,
        Cursor(seq=0),
        Cursor(seq=2),
        Cursor(epoch=session.epoch, seq=0),
        Cursor(epoch=session.epoch, seq=3),
        Cursor(epoch=session.epoch, seq=session.seq),
        Cursor(epoch=session.epoch, seq=session.seq + 1),
        Cursor(epoch="0" * 16, seq=1),
    ]
    modes: set[str] = set()
    for cursor in cursors:
        result, _ = session.attach(Recorder(), "observer", cursor)
        modes.add(result.mode)
        assert (result.snapshot is not None) == (result.mode == "snapshot"), cursor
    assert modes == {"replay", "snapshot"}


# --- errors ------------------------------------------------------------------------------------


RECEIVERS = {
    "sessions": "Sessions",
    "_turns": "Turns",
    "turns": "Turns",
    "broker": "ApprovalBroker",
    "processes": "ProcessTable",
}
"""The objects the handlers reach the rest of the daemon through, by the name they are held
under (`self.sessions.get(...)`, `broker.respond(...)`), and their classes."""


class _Function:
    def __init__(self) -> None:
        self.codes: set[ErrorCode] = set()
        self.calls: set[str] = set()


def _callee(call: ast.Call, cls: str | None) -> str | None:
    match call.func:
        case ast.Name(id=name):
            return name
        case ast.Attribute(value=ast.Name(id="self"), attr=name) if cls is not None:
            return f"{cls}.{name}"
        case ast.Attribute(value=ast.Attribute(attr=held) | ast.Name(id=held), attr=name) if (
            held in RECEIVERS
        ):
            return f"{RECEIVERS[held]}.{name}"
        case _:
            return None


@functools.cache  # the daemon's sources are parsed once for the tests here
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def _daemon_functions() -> dict[str, _Function]:
    """Every function of the daemon (`Class.method` or `function`): the error codes it names
    and the functions it calls, as far as a call can be resolved without running it (a method
    of the same class, of a `RECEIVERS` object, or a module's function)."""
    functions: dict[str, _Function] = {}

    def scan(node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None) -> None:
        function = functions.setdefault(f"{cls}.{node.name}" if cls else node.name, _Function())
        for inner in ast.walk(node):
            match inner:
                case ast.Attribute(value=ast.Name(id="ErrorCode"), attr=code):
                    function.codes.add(ErrorCode[code])
                case ast.Call():
                    callee = _callee(inner, cls)
                    if callee is not None:
                        function.calls.add(callee)
                case _:
                    pass

    for path in DAEMON.rglob("*.py"):
        if "testing" in path.relative_to(DAEMON).parts:
            continue
        for top in _tree(path).body:
            if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
                scan(top, None)
            elif isinstance(top, ast.ClassDef):
                for node in top.body:
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                        scan(node, top.name)
    return functions


def _reachable(functions: dict[str, _Function], name: str) -> tuple[set[ErrorCode], set[str]]:
    """The codes `name` can raise, and the functions it reaches."""
    seen: set[str] = set()
    codes: set[ErrorCode] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen or current not in functions:
            continue
        seen.add(current)
        codes |= functions[current].codes
        pending.extend(functions[current].calls)
    return codes, seen


def _handler_names() -> Iterator[tuple[str, str]]:
    """(method name, handler function name) from `Handlers.table`."""
    tree = ast.parse(inspect.getsource(Handlers.table).strip().replace("\n    ", "\n"))
    for node in ast.walk(tree):
        match node:
            case ast.Call(
                func=ast.Name(id="on"),
                args=[ast.Name(id=descriptor), ast.Attribute(attr=handler)],
            ):
                yield getattr(methods, descriptor).name, handler
            case _:
                pass


def test_each_method_declares_the_errors_its_handler_can_raise() -> None:
    functions = _daemon_functions()
    pairs = dict(_handler_names())
    assert set(pairs) == set(METHODS)
    wrong: list[str] = []
    reached: set[str] = set()
    for method, handler in pairs.items():
        raised, seen = _reachable(functions, f"Handlers.{handler}")
        reached |= seen
        raised -= GENERIC_ERRORS
        declared = set(METHODS[method].errors)
        if raised - declared:
            wrong.append(f"{method} can raise {sorted(c.name for c in raised - declared)}")
        if declared - raised:
            wrong.append(f"{method} declares {sorted(c.name for c in declared - raised)}")
    assert not wrong
    # Every place that raises a method's own error is on some handler's path: a call the
    # analysis could not follow would show up here (add its receiver to RECEIVERS).
    unreached = sorted(
        name
        for name, function in functions.items()
        if function.codes - GENERIC_ERRORS and name not in reached
    )
    assert not unreached


def test_every_error_code_is_raised_somewhere() -> None:
    raised = {code for f in _daemon_functions().values() for code in f.codes}
    protocol = {
        ErrorCode[node.attr]
        for path in (ROOT / "protocol").glob("*.py")
        if path.name != "errors.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ErrorCode"
        and node.attr in ErrorCode.__members__
    }
    assert set(ErrorCode) - raised - protocol == set()


def test_error_data_has_the_published_shape() -> None:
    """An `RpcError` with `data` passes the struct `ERROR_DATA` names for its code, and only
    those codes carry data."""
    for path in DAEMON.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            match node:
                case ast.Call(
                    func=ast.Name(id="RpcError"),
                    args=[ast.Attribute(value=ast.Name(id="ErrorCode"), attr=code), _, data],
                ):
                    kind = ERROR_DATA.get(ErrorCode[code])
                    assert kind is not None, f"{path}: {code} carries no data"
                    assert isinstance(data, ast.Call), f"{path}: {code} data"
                    assert isinstance(data.func, ast.Name), f"{path}: {code} data"
                    assert data.func.id == kind.__name__, f"{path}: {code} data"
                case _:
                    pass
    errors = _section("errors")
    for code, kind in ERROR_DATA.items():
        assert errors[str(int(code))]["data"] == {"$ref": f"#/$defs/{kind.__name__}"}


def test_the_schema_lists_each_methods_errors() -> None:
    published = _section("methods")
    for name, method in METHODS.items():
        listed = published[name]["errors"]
        assert listed == [int(code) for code in method.errors]
        if method.needs_controller:
            assert int(ErrorCode.NOT_CONTROLLER) in method.errors, name


def test_no_error_code_is_given_twice_across_the_daemon_and_the_bridge() -> None:
    """The bridge answers some requests itself (`docs/bridge.md`); a client reading a code
    must not have to ask which side sent it."""
    from tether.clients import bridge

    # Through __members__: iterating an enum skips the aliases a repeated value makes.
    daemon_codes = [int(code) for code in ErrorCode.__members__.values()]
    assert len(daemon_codes) == len(set(daemon_codes))
    assert {bridge.DISCONNECTED, bridge.RECONNECT_FAILED}.isdisjoint(daemon_codes)
