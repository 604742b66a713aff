"""The text tool-call fallback: reading `<tool_call>` blocks out of a streamed reply, writing
calls and results back as text, and recognising servers that refuse tools."""

import json

import msgspec
import pytest

from tether.daemon.providers import anthropic, openai
from tether.daemon.providers.base import Message, ToolCallRequest, ToolSet, ToolSpec
from tether.daemon.providers.texttools import (
    TextToolCalls,
    render_assistant,
    render_tool_result,
    says_tools_unsupported,
    tools_section,
)


def run(deltas: list[str]) -> tuple[list[str], str, list[ToolCallRequest]]:
    """Feed `deltas`; return what was shown (per feed, then the tail), the text and the calls."""
    reader = TextToolCalls()
    shown = [reader.feed(d) for d in deltas]
    tail, calls = reader.finish()
    shown.append(tail)
    assert "".join(shown) == reader.text
    return shown, reader.text, calls


def one_char_at_a_time(text: str) -> list[str]:
    return list(text)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


REPLY = (
    "I'll read the README first.\n\n"
    '<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>\n'
    '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>\n'
)


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_blocks_become_calls_and_never_reach_the_shown_text(size: int) -> None:
    shown, text, calls = run(pieces(REPLY, size))
    assert text == "I'll read the README first."
    assert not any("<" in piece for piece in shown)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("read_file", {"path": "README.md"}),
        ("list_dir", {}),
    ]
    assert len({c.id for c in calls}) == 2
    assert all(c.id.startswith("call_") for c in calls)


def test_text_streams_live_up_to_a_possible_marker() -> None:
    reader = TextToolCalls()
    assert reader.feed("Hello") == "Hello"
    assert reader.feed(" world\n") == " world"  # trailing whitespace waits
    assert reader.feed("<to") == ""  # may be the start of a marker
    assert reader.feed("day> is fine") == "\n<today> is fine"
    assert reader.feed(" a < b") == " a < b"
    assert reader.finish() == ("", [])
    assert reader.text == "Hello world\n<today> is fine a < b"


def test_a_reply_without_blocks_is_shown_whole() -> None:
    text = "No tools needed.\n\nBye  \n"
    _, shown_text, calls = run(one_char_at_a_time(text))
    assert shown_text == text
    assert calls == []


def test_text_around_blocks_is_kept_after_what_was_shown() -> None:
    reply = (
        'Let me check.<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
        " then also "
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>\nDone?'
    )
    shown, text, calls = run(one_char_at_a_time(reply))
    assert text == "Let me check.\n\nthen also\n\nDone?"
    assert shown[-1] == "\n\nthen also\n\nDone?"
    assert [c.name for c in calls] == ["a", "b"]


def test_an_unterminated_last_block_counts_when_it_is_a_call() -> None:
    _, text, calls = run(['Sure.\n<tool_call>{"name": "grep", "arguments": {"pattern": "x"}}'])
    assert text == "Sure."
    assert [(c.name, c.arguments) for c in calls] == [("grep", '{"pattern":"x"}')]


def test_an_unterminated_marker_in_prose_stays_text() -> None:
    _, text, calls = run(["Use a <tool_call> block to call a tool."])
    assert text == "Use a\n\n<tool_call> block to call a tool."
    assert calls == []


def test_a_malformed_block_still_becomes_a_call_the_model_hears_about() -> None:
    _, text, calls = run(['<tool_call>{"name": "read_file", "arguments": {"path": }</tool_call>'])
    assert text == ""
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", '{"name": "read_file", "arguments": {"path": }')
    ]


@pytest.mark.parametrize(
    ("block", "arguments"),
    [
        ('{"name": "t", "parameters": {"a": 1}}', '{"a":1}'),
        ('{"name": "t", "arguments": "{\\"a\\": 1}"}', '{"a": 1}'),
        ('{"name": "t"}', "{}"),
        ('{"name": "t", "arguments": null}', "{}"),
    ],
)
def test_argument_spellings(block: str, arguments: str) -> None:
    _, _, calls = run([f"<tool_call>{block}</tool_call>"])
    assert [(c.name, c.arguments) for c in calls] == [("t", arguments)]


def test_assistant_calls_and_results_are_written_back_in_the_same_format() -> None:
    message = Message(
        role="assistant",
        content="Reading.\n",
        tool_calls=[
            ToolCallRequest(id="c1", name="read_file", arguments='{"path": "a"}'),
            ToolCallRequest(id="c2", name="read_file", arguments="{broken"),
        ],
    )
    rendered = render_assistant(message)
    assert rendered == (
        "Reading.\n\n"
        '<tool_call>{"name":"read_file","arguments":{"path": "a"}}</tool_call>\n'
        '<tool_call>{"name":"read_file","arguments":"{broken"}</tool_call>'
    )
    _, text, calls = run([rendered])
    assert text == "Reading."
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", '{"path":"a"}'),
        ("read_file", "{broken"),
    ]
    result = Message(role="tool", content="1\thello", tool_call_id="c1", tool_name="read_file")
    assert render_tool_result(result) == (
        '<tool_result name="read_file" id="c1">\n1\thello\n</tool_result>'
    )


def test_tools_section_lists_every_tool_and_is_made_once() -> None:
    schema = b'{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}'
    tools = ToolSet(
        specs=[
            ToolSpec(name="read_file", description="Read a file.", parameters=msgspec.Raw(schema)),
            ToolSpec(name="list_dir", description="List.", parameters=msgspec.Raw(b"{}")),
        ]
    )
    raw = tools_section(tools)
    assert tools_section(tools) is raw
    text = msgspec.json.decode(raw, type=str)
    assert '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>' in text
    assert "### read_file\n\nRead a file.\n\nParameters: " + schema.decode() in text
    assert "### list_dir" in text


def test_each_dialect_encodes_a_tool_set_once_under_its_own_key() -> None:
    tools = ToolSet(
        specs=[ToolSpec(name="list_dir", description="List.", parameters=msgspec.Raw(b"{}"))]
    )
    native = anthropic.encode_tools(tools)
    chat = openai.encode_tools(tools)
    text = tools_section(tools)
    assert anthropic.encode_tools(tools) is native
    assert openai.encode_tools(tools) is chat
    assert tools_section(tools) is text
    assert len({id(native), id(chat), id(text)}) == len(tools.cache) == 3
    assert json.loads(bytes(native)) == [
        {"name": "list_dir", "description": "List.", "input_schema": {}}
    ]
    assert json.loads(bytes(chat)) == [
        {
            "type": "function",
            "function": {"name": "list_dir", "description": "List.", "parameters": {}},
        }
    ]


@pytest.mark.parametrize(
    "message",
    [
        "registry.ollama.ai/library/gemma3:4b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tools param requires --jinja flag",
        "Tool use is not supported for this model",
        "tools is not supported",
        "This model does not support function calling",
        "tool calling is not supported by this endpoint",
    ],
)
def test_refusals_of_tools_are_recognised(message: str) -> None:
    assert says_tools_unsupported(message)


@pytest.mark.parametrize(
    "message",
    [
        "Unrecognized request argument supplied: stream_options",
        "This model's maximum context length is 4096 tokens",
        "tool_call_id not found",
    ],
)
def test_other_errors_are_not_refusals_of_tools(message: str) -> None:
    assert not says_tools_unsupported(message)
