"""The TypeScript declarations are generated from the method table and committed."""

from pathlib import Path

import msgspec

from tether.protocol.methods import METHODS, NOTIFICATIONS
from tether.protocol.typescript import render_typescript

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "clients" / "typescript" / "src" / "protocol.ts"


def test_committed_typescript_types_are_current() -> None:
    assert GENERATED.read_text() == render_typescript(), (
        "clients/typescript/src/protocol.ts is stale: run "
        "`python -m tether.protocol.typescript > clients/typescript/src/protocol.ts`"
    )


def test_every_method_and_notification_is_in_the_method_map() -> None:
    text = render_typescript()
    methods = text.split("export interface Methods {", 1)[1].split("\n}\n", 1)[0]
    for name, method in METHODS.items():
        params, result = method.params.__name__, method.result.__name__
        assert f'"{name}": {{ params: {params}; result: {result} }};' in methods
    notes = text.split("export interface Notifications {", 1)[1].split("\n}\n", 1)[0]
    for name, kind in NOTIFICATIONS.items():
        assert f'"{name}": {kind.__name__};' in notes


def test_tagged_unions_list_every_member_with_its_tag() -> None:
    text = render_typescript()
    assert "export type AnyEvent = TurnStarted | ItemStarted |" in text
    assert 'export type EventType = AnyEvent["type"];' in text
    assert "export type AnyItem = UserMessage | AgentMessage |" in text
    assert 'type: "tool_call";' in text.split("export interface ToolCall {", 1)[1]


def test_a_field_with_a_default_is_optional_and_one_without_is_required() -> None:
    tool_call = render_typescript().split("export interface ToolCall {", 1)[1].split("\n}", 1)[0]
    assert "\n  callId: string;" in tool_call
    assert "\n  output?: string;" in tool_call
    assert "\n  exitCode?: number | null;" in tool_call


class _Probe(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A struct the table does not hold: the generator reads shapes, not a list of names."""

    name: str
    count: int = 0
    tags: list[str] = []
    note: str | None = None
    weird_key: dict[str, int] = {}
    what: str = msgspec.field(default="", name="what-ever")


def test_generated_fields_follow_the_schema_for_any_struct() -> None:
    from tether.protocol.typescript import _Emitter  # pyright: ignore[reportPrivateUsage]

    (ref,), defs = msgspec.json.schema_components([_Probe], ref_template="#/$defs/{name}")
    emitter = _Emitter({"$defs": defs})
    body = "\n".join(emitter.fields(defs["_Probe"], ""))
    assert ref == {"$ref": "#/$defs/_Probe"}
    assert "name: string;" in body.splitlines()
    assert "count?: number;" in body.splitlines()
    assert "tags?: Array<string>;" in body.splitlines()
    assert "note?: string | null;" in body.splitlines()
    assert "weirdKey?: Record<string, number>;" in body.splitlines()
    assert '"what-ever"?: string;' in body.splitlines()
