"""The schema for code generators (packaging/schema/tether-protocol.types.schema.json): it is
committed and current, its root names every message, and datamodel-code-generator (a dev
dependency) turns it into Python types named for the messages that read the daemon's own
wire messages."""

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import msgspec

from tether.protocol.events import ItemCompleted
from tether.protocol.items import AgentMessage
from tether.protocol.methods import SessionEventParams, TurnStartParams
from tether.protocol.types_schema import build_types_schema, render_types_schema

ROOT = Path(__file__).resolve().parents[2]
TYPES_SCHEMA = ROOT / "packaging" / "schema" / "tether-protocol.types.schema.json"
CATALOGUE = ROOT / "packaging" / "schema" / "tether-protocol.schema.json"


def test_committed_types_schema_is_current() -> None:
    assert TYPES_SCHEMA.read_text() == render_types_schema(), (
        "packaging/schema is stale: run `python -m tether.protocol.types_schema > "
        "packaging/schema/tether-protocol.types.schema.json`"
    )


def test_its_root_names_every_message_of_the_catalogue() -> None:
    catalogue = msgspec.json.decode(CATALOGUE.read_bytes())
    expected = {
        entry[part]["$ref"]
        for section in ("methods", "notifications", "clientNotifications")
        for entry in catalogue[section].values()
        for part in ("params", "result")
        if part in entry
    }
    expected.add(catalogue["discoveryFile"]["$ref"])
    expected |= {e["data"]["$ref"] for e in catalogue["errors"].values() if "data" in e}
    schema = build_types_schema()
    roots = schema["anyOf"]
    assert isinstance(roots, list)
    assert {option["$ref"] for option in roots} == expected  # pyright: ignore[reportUnknownVariableType]
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    assert set(catalogue["$defs"]) <= set(defs)  # pyright: ignore[reportUnknownArgumentType]


def generate(tmp_path: Path) -> ModuleType:
    """Python (pydantic) types made from the schema by datamodel-code-generator, imported."""
    output = tmp_path / "tether_types.py"
    codegen = Path(sys.executable).parent / "datamodel-codegen"
    done = subprocess.run(
        [
            str(codegen),
            "--input",
            str(TYPES_SCHEMA),
            "--input-file-type",
            "jsonschema",
            "--output-model-type",
            "pydantic_v2.BaseModel",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spec = importlib.util.spec_from_file_location("tether_types", output)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # pydantic looks its generic models' module up while the module is being made.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_generated_python_is_named_for_the_messages(tmp_path: Path) -> None:
    module = generate(tmp_path)
    names = {name for name, value in vars(module).items() if inspect.isclass(value)}
    assert {
        "TetherMessage",
        "TurnStartParams",
        "SessionEventParams",
        "ItemCompleted",
        "AgentMessage",
        "LspServerStatusState",
    } <= names
    numbered = sorted(name for name in names if re.fullmatch(r"[A-Za-z]+\d+", name))
    assert numbered == []
    assert "Type" not in names
    # A session event as the daemon sends it reads into the generated types, its union told
    # apart by `type`.
    event = SessionEventParams(
        session_id="s1",
        epoch="e1",
        seq=3,
        event=ItemCompleted(turn_id="t1", item=AgentMessage(id="i1", text="hello", step=1)),
    )
    read = module.SessionEventParams.model_validate_json(msgspec.json.encode(event))
    assert type(read.event).__name__ == "ItemCompleted"
    assert type(read.event.item).__name__ == "AgentMessage"
    assert read.event.item.text == "hello"
    start = TurnStartParams(session_id="s1", text="go", mentions=["src/app.py"])
    assert module.TurnStartParams.model_validate_json(msgspec.json.encode(start)).mentions == [
        "src/app.py"
    ]
