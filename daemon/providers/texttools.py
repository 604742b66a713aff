"""The text tool-call fallback, for models that refuse tool definitions.

Instead of sending `tools`, the system prompt gets a section that lists each tool (name,
description, JSON Schema) and the one call format the model must use::

    <tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>

The model ends its reply with such blocks; `TextToolCalls` takes them out of the streamed text
(holding back anything from a `<tool_call>` marker on, so clients never see raw blocks) and
turns them into `ToolCallRequest`s. Earlier assistant turns are sent back rendered the same
way, and tool results go back as user text::

    <tool_result name="read_file" id="call_…">
    …output…
    </tool_result>

Providers switch to this mode when configured (`tool_mode = "text"`) or, in `auto`, when the
server answers that the model does not support tools (`says_tools_unsupported`).
"""

import re
import secrets
from typing import Literal, cast, overload

import msgspec

from tether.daemon.providers.base import Message, ToolCallRequest, ToolSet, encoded_once

ToolMode = Literal["auto", "native", "text"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"

_TOOLS_UNSUPPORTED = re.compile(
    r"does not support (?:tools|tool|function)"  # Ollama: "… does not support tools"
    r"|(?:tools?|tool use|tool calling|tool_choice|function calling)\s+(?:is|are)\s+not\s+supported"
    r"|tool[ _]choice\W*(?:requires|is not)"  # vLLM: '"auto" tool choice requires --enable-…'
    r"|tools param requires"  # llama.cpp: "tools param requires --jinja flag"
    r"|unsupported (?:parameter|field)\W*\W?tools",
    re.IGNORECASE,
)


def says_tools_unsupported(detail: str) -> bool:
    """Whether a server's error message says the model or server does not take tools."""
    return _TOOLS_UNSUPPORTED.search(detail) is not None


_PROMPT_HEAD = f"""\
# Tools

Tools are available, but this model server does not take tool definitions, so they are \
described here. To call tools, end your reply with one block per call, in exactly this form:

{OPEN}{{"name": "TOOL_NAME", "arguments": {{...}}}}{CLOSE}

The JSON inside a block must be valid, and "arguments" must match the tool's parameters schema. \
Write nothing after the last block. The results arrive in the next user message as \
<tool_result name="..." id="...">...</tool_result> blocks. When you need no tool, answer normally, \
without any {OPEN} block.

## Available tools
"""

TEXT_TOOLS_KEY = "text-tools"


def tools_section(tools: ToolSet) -> msgspec.Raw:
    """The system-prompt section describing `tools`, as an encoded JSON string (made once per
    tool set and kept in its cache)."""

    def encode() -> bytes:
        parts = [_PROMPT_HEAD]
        for spec in tools.specs:
            schema = bytes(spec.parameters).decode()
            description = spec.description.strip()
            parts.append(f"\n### {spec.name}\n\n{description}\n\nParameters: {schema}\n")
        return msgspec.json.encode("".join(parts))

    return encoded_once(tools.cache, TEXT_TOOLS_KEY, encode)


class _Block(msgspec.Struct):
    name: str
    arguments: msgspec.Raw | str


def render_text(message: Message) -> str:
    """A message as text mode sends it: an assistant's tool calls and a tool's result written
    out, anything else as it is."""
    if message.role == "assistant":
        return render_assistant(message)
    if message.role == "tool":
        return render_tool_result(message)
    return message.content


def render_assistant(message: Message) -> str:
    """An assistant message as the model wrote it in text mode: its text, then its calls."""
    if not message.tool_calls:
        return message.content
    blocks = "\n".join(
        OPEN
        + msgspec.json.encode(_Block(call.name, _arguments_value(call.arguments))).decode()
        + CLOSE
        for call in message.tool_calls
    )
    text = message.content.rstrip()
    return f"{text}\n\n{blocks}" if text else blocks


def _arguments_value(arguments: str) -> msgspec.Raw | str:
    stripped = arguments.strip() or "{}"
    try:
        msgspec.json.decode(stripped)
    except msgspec.DecodeError:
        return arguments
    return msgspec.Raw(stripped.encode())


def render_tool_result(message: Message) -> str:
    name = message.tool_name or "tool"
    head = f'<tool_result name="{name}" id="{message.tool_call_id}">'
    return f"{head}\n{message.content}\n</tool_result>"


_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")


class TextToolCalls:
    """Separates `<tool_call>` blocks from a reply as it streams.

    `feed` returns the part of each delta that is safe to show: text up to a `<tool_call>`
    marker, minus a trailing partial marker or trailing whitespace that may still turn out to
    precede one. `finish` returns the rest of the visible text (anything written around the
    blocks) and the calls. Everything shown, joined, is the reply's text without its blocks.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._after: list[str] | None = None
        self._shown: list[str] = []

    def feed(self, delta: str) -> str:
        if self._after is not None:
            self._after.append(delta)
            return ""
        pending = self._pending + delta
        start = pending.find(OPEN)
        if start >= 0:
            self._after = [pending[start:]]
            self._pending = ""
            return self._show(pending[:start].rstrip())
        keep = _partial_marker_length(pending)
        visible = pending[: len(pending) - keep].rstrip()
        self._pending = pending[len(visible) :]
        return self._show(visible)

    def finish(self) -> tuple[str, list[ToolCallRequest]]:
        """The visible text not yet shown, and the calls read from the blocks."""
        if self._after is None:
            tail, self._pending = self._pending, ""
            return self._show(tail), []
        rest = "".join(self._after)
        self._after = None
        calls: list[ToolCallRequest] = []
        outside: list[str] = []
        position = 0
        for match in _BLOCK.finditer(rest):
            outside.append(rest[position : match.start()])
            calls.append(_parse_call(match.group(1), strict=False))
            position = match.end()
        leftover = rest[position:]
        if leftover.startswith(OPEN):
            # An unterminated last block (a stop sequence or the output limit cut it): a call if
            # it reads as one, else text.
            call = _parse_call(leftover[len(OPEN) :], strict=True)
            if call is not None:
                calls.append(call)
                leftover = ""
        outside.append(leftover)
        extra = "\n\n".join(part.strip() for part in outside if part.strip())
        if extra and self._shown:
            extra = "\n\n" + extra
        return self._show(extra), calls

    @property
    def text(self) -> str:
        return "".join(self._shown)

    def _show(self, text: str) -> str:
        if text:
            self._shown.append(text)
        return text


def _partial_marker_length(text: str) -> int:
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:size]):
            return size
    return 0


def _new_call_id() -> str:
    return f"call_{secrets.token_hex(6)}"


@overload
def _parse_call(body: str, *, strict: Literal[False]) -> ToolCallRequest: ...
@overload
def _parse_call(body: str, *, strict: bool) -> ToolCallRequest | None: ...
def _parse_call(body: str, *, strict: bool) -> ToolCallRequest | None:
    """A call from the JSON inside a block. A block that is not a JSON object naming a tool
    still becomes a call (unless `strict`), so that the model hears its call was malformed."""
    try:
        data: object = msgspec.json.decode(body.strip())
    except msgspec.DecodeError:
        data = None
    if isinstance(data, dict):
        fields = cast(dict[str, object], data)
        name = fields.get("name")
        if isinstance(name, str) and name:
            arguments = next((fields[k] for k in _ARGUMENT_KEYS if k in fields), None)
            if arguments is None:
                encoded = "{}"
            elif isinstance(arguments, str):
                encoded = arguments
            else:
                encoded = msgspec.json.encode(arguments).decode()
            return ToolCallRequest(id=_new_call_id(), name=name, arguments=encoded)
    if strict:
        return None
    found = _NAME.search(body)
    return ToolCallRequest(
        id=_new_call_id(), name=found.group(1) if found else "", arguments=body.strip()
    )
