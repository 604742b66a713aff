"""The conversation as the model sees it, kept as pre-encoded OpenAI chat messages.

Each message is encoded to JSON once, when it is added; a model call then only concatenates
them. The first message is the system prompt, which never changes within a session, so the
prompt prefix stays byte-identical and provider prompt caches keep hitting.
"""

from collections.abc import Iterable

import msgspec

from tether.daemon.providers.base import ToolCallRequest
from tether.protocol.items import AgentMessage, AnyItem, ToolCall, UserMessage

INTERRUPTED_RESULT = "[no result: the turn ended before this tool call finished]"


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function
    type: str = "function"


class _Message(msgspec.Struct, omit_defaults=True):
    role: str
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


_encoder = msgspec.json.Encoder()


def _raw(message: _Message) -> msgspec.Raw:
    return msgspec.Raw(_encoder.encode(message))


class History:
    def __init__(self, system_prompt: str) -> None:
        self.messages: list[msgspec.Raw] = [_raw(_Message(role="system", content=system_prompt))]
        self._open_calls: list[str] = []

    def add_user(self, text: str) -> None:
        self.close_open_calls()
        self.messages.append(_raw(_Message(role="user", content=text)))

    def add_assistant(self, text: str, tool_calls: Iterable[ToolCallRequest]) -> None:
        calls = [
            _ToolCall(id=c.id, function=_Function(name=c.name, arguments=c.arguments))
            for c in tool_calls
        ]
        self.messages.append(
            _raw(_Message(role="assistant", content=text or None, tool_calls=calls or None))
        )
        self._open_calls = [c.id for c in calls]

    def add_tool_result(self, call_id: str, output: str) -> None:
        self.messages.append(_raw(_Message(role="tool", content=output, tool_call_id=call_id)))
        if call_id in self._open_calls:
            self._open_calls.remove(call_id)

    def close_open_calls(self) -> None:
        """Answer every call still without a result, so the history stays valid for providers
        that require each tool call to be answered (after a cancel or a crash)."""
        for call_id in list(self._open_calls):
            self.add_tool_result(call_id, INTERRUPTED_RESULT)

    def rebuild(self, items: Iterable[AnyItem]) -> None:
        """Append the messages a finished conversation's items stand for."""
        step_key: tuple[int, int] | None = None
        pending_text = ""
        pending_calls: list[ToolCall] = []
        turn_index = 0

        def flush() -> None:
            nonlocal pending_text, pending_calls
            if pending_text or pending_calls:
                self.add_assistant(
                    pending_text,
                    [
                        ToolCallRequest(id=c.call_id, name=c.tool, arguments=c.arguments)
                        for c in pending_calls
                    ],
                )
                for call in pending_calls:
                    if call.status != "running":
                        self.add_tool_result(call.call_id, call.output)
                self.close_open_calls()
            pending_text, pending_calls = "", []

        for item in items:
            if isinstance(item, UserMessage):
                flush()
                turn_index += 1
                self.add_user(item.text)
                step_key = None
            elif isinstance(item, AgentMessage | ToolCall):
                key = (turn_index, item.step)
                if key != step_key:
                    flush()
                    step_key = key
                if isinstance(item, AgentMessage):
                    pending_text += item.text
                else:
                    pending_calls.append(item)
        flush()
