"""The protocol package: its schema is committed and current, and it stays a leaf."""

import ast
import sys
from pathlib import Path

import msgspec
import pytest

from tether.protocol import codec
from tether.protocol.errors import ERROR_DOCS, ErrorCode, RpcError
from tether.protocol.events import ItemDelta, TurnCompleted
from tether.protocol.jsonrpc import FrameError, decode_envelope
from tether.protocol.methods import METHODS, SessionEventParams
from tether.protocol.schema import render_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "packaging" / "schema" / "tether-protocol.schema.json"
# `_sha2` is the built-in SHA-2 module's name from Python 3.12 on (`_sha256` before).
STDLIB = set(sys.stdlib_module_names) | {"_sha2"}


def _imports(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def test_committed_schema_is_current() -> None:
    assert SCHEMA.read_text() == render_schema(), (
        "packaging/schema is stale: run "
        "`python -m tether.protocol.schema > packaging/schema/tether-protocol.schema.json`"
    )


def test_schema_covers_every_method_and_error() -> None:
    schema = msgspec.json.decode(SCHEMA.read_bytes())
    assert set(schema["methods"]) == set(METHODS)
    assert set(schema["notifications"]) == {
        "session/event",
        "session/resync",
        "session/deleted",
        "daemon/event",
    }
    assert {int(code) for code in schema["errors"]} == {int(code) for code in ErrorCode}
    assert set(ERROR_DOCS) == set(ErrorCode)


def test_protocol_imports_only_stdlib_and_msgspec() -> None:
    for module, names in _imports(ROOT / "protocol").items():
        for name in names:
            top = name.split(".")[0]
            allowed = top in STDLIB or top == "msgspec" or name.startswith("tether.protocol")
            # Off Linux the shared places are platformdirs' answers; Linux never imports it.
            allowed = allowed or (module == "protocol/places.py" and name == "platformdirs")
            assert allowed, f"{module} imports {name}"


def test_the_shared_places_import_platformdirs_only_inside_a_function() -> None:
    tree = ast.parse((ROOT / "protocol" / "places.py").read_text())
    top_level = {
        alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names
    }
    top_level |= {
        node.module for node in tree.body if isinstance(node, ast.ImportFrom) if node.module
    }
    assert "platformdirs" not in top_level


def test_clients_never_import_the_daemon() -> None:
    for module, names in _imports(ROOT / "clients").items():
        bad = [n for n in names if n == "tether.daemon" or n.startswith("tether.daemon.")]
        assert not bad, f"{module} imports {bad}"


def test_the_daemon_imports_nothing_of_the_clients() -> None:
    # Where the discovery and lock files live is computed once, in tether.protocol.places, so
    # daemon and clients cannot disagree; the places need nothing of either side.
    for module, names in _imports(ROOT / "daemon").items():
        bad = [n for n in names if n == "tether.clients" or n.startswith("tether.clients.")]
        assert not bad, f"{module} imports {bad}"
    places = _imports(ROOT / "protocol")["protocol/places.py"]
    tether = {n for n in places if n.startswith("tether.")}
    assert tether == {"tether.protocol.workspace_files"}


def _tether_imports() -> dict[str, set[str]]:
    return {
        module: names
        for folder in ("protocol", "daemon", "clients")
        for module, names in _imports(ROOT / folder).items()
    }


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_nothing_outside_the_terminal_client_imports_it() -> None:
    # The ACP agent, the notebook client and the bridge stand on the client core, beside the
    # terminal client, not on it.
    imports = _tether_imports()
    assert any(module.startswith("clients/cli/") for module in imports)
    for module, names in imports.items():
        if module.startswith("clients/cli/"):
            continue
        bad = [n for n in names if _within(n, "tether.clients.cli")]
        assert not bad, f"{module} imports {bad}"


def test_the_client_core_imports_only_itself_and_the_protocol() -> None:
    core = {m: n for m, n in _tether_imports().items() if m.startswith("clients/core/")}
    assert "clients/core/rpc.py" in core
    for module, names in core.items():
        tether = {n for n in names if _within(n, "tether")}
        bad = [
            n
            for n in tether
            if not _within(n, "tether.clients.core") and not _within(n, "tether.protocol")
        ]
        assert not bad, f"{module} imports {bad}"


def test_envelope_errors_are_classified() -> None:
    with pytest.raises(FrameError) as parse:
        decode_envelope(b"{nope")
    assert parse.value.code == ErrorCode.PARSE_ERROR
    with pytest.raises(FrameError) as batch:
        decode_envelope(b"[]")
    assert batch.value.code == ErrorCode.INVALID_REQUEST
    envelope = decode_envelope(b'{"jsonrpc":"2.0","id":"7","method":"x","params":{"a":1}}')
    assert (envelope.id, envelope.method, bytes(envelope.params)) == ("7", "x", b'{"a":1}')


@pytest.mark.parametrize(
    "frame",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_json_nested_deeper_than_the_reader_goes_is_a_parse_error(frame: bytes) -> None:
    with pytest.raises(FrameError) as deep:
        decode_envelope(frame)
    assert deep.value.code == ErrorCode.PARSE_ERROR
    assert "nested too deeply" in deep.value.message


def test_bad_params_name_the_field_in_wire_spelling() -> None:
    with pytest.raises(RpcError) as missing:
        codec.decode_params("turn/start", msgspec.Raw(b'{"text":"hi"}'))
    assert missing.value.code == ErrorCode.INVALID_PARAMS
    assert "sessionId" in missing.value.message
    with pytest.raises(RpcError) as wrong:
        codec.decode_params("session/create", msgspec.Raw(b'{"title":5}'))
    assert "$.title" in wrong.value.message


def test_unknown_fields_are_ignored_and_defaults_fill_in() -> None:
    params = codec.decode_params(
        "session/attach", msgspec.Raw(b'{"sessionId":"s_1","fromTheFuture":true}')
    )
    assert msgspec.to_builtins(params) == {"sessionId": "s_1"}


def test_events_round_trip_as_tagged_union_in_camel_case() -> None:
    params = SessionEventParams(
        session_id="s", epoch="e", seq=3, event=ItemDelta(turn_id="t", item_id="i", delta="x")
    )
    wire = codec.encode(params)
    assert b'"type":"item_delta"' in wire
    assert b'"itemId":"i"' in wire
    back = codec.decode_notification("session/event", wire)
    assert back == params
    done = codec.decode_notification(
        "session/event",
        b'{"sessionId":"s","epoch":"e","seq":4,"event":'
        b'{"type":"turn_completed","turnId":"t","status":"completed","endedAt":1.5}}',
    )
    assert isinstance(done, SessionEventParams)
    assert isinstance(done.event, TurnCompleted)
    assert done.event.usage.input_tokens == 0
