"""The conversation as the model sees it: a growing list of provider-neutral messages.

The first message is the system prompt, which never changes within a turn (between turns only
when the skills catalog does), so the prompt prefix stays byte-identical and provider prompt
caches keep hitting. Providers encode each
message once and keep the encoding on it (see `Message.cache`).

A user message, and a tool's result, may carry images (`Message.images`, with their bytes):
the bytes are looked up by SHA-256 in `History.image_data` when the message is added, so
whoever adds it puts them there first (the session when a message is sent or before a rebuild
reads the items, the turn loop for a tool's images); an image whose bytes are gone is named in
the text instead. A summary drops the images of the messages it replaces.

A summary of the earlier conversation (compaction's last step) stands in the history as one
user message right after the system prompt; `History.replace_with_summary` is the one place that
puts it there, both when the model has just written it and when a session is rebuilt from its
items, so the rebuilt conversation is the one the model saw.
"""

from collections.abc import Iterable, Sequence

from tether.daemon.context.images import image_part
from tether.daemon.providers.base import ImagePart, Message, ToolCallRequest
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Compaction,
    ImageRef,
    ToolCall,
    UserMessage,
)

INTERRUPTED_RESULT = "[no result: the turn ended before this tool call finished]"
SUMMARY_HEADER = "[summary of the earlier conversation]"
SUMMARY_FRAME = (
    "The earlier part of this conversation was replaced by this summary to save context. "
    "Anything not in it is gone: read files again when you need their content."
)
SUMMARY_CONTINUE = "[end of summary: continue the work from its current state and next steps]"


def summary_message(text: str, *, continues: bool) -> Message:
    """The user-side message that stands for the summarised history; `continues` when
    messages kept verbatim follow it."""
    content = f"{SUMMARY_HEADER}\n{SUMMARY_FRAME}\n\n{text}"
    if not continues:
        content += f"\n\n{SUMMARY_CONTINUE}"
    return Message(role="user", content=content)


def is_summary(message: Message) -> bool:
    return message.role == "user" and message.content.startswith(SUMMARY_HEADER)


class History:
    def __init__(self, system_prompt: str) -> None:
        self.messages: list[Message] = [Message(role="system", content=system_prompt)]
        """One list for the history's whole life: changed in place, never rebound, so whoever
        holds it (a `TokenMeter`) always reads the current conversation."""
        self._open_calls: dict[str, str] = {}
        """call id -> tool name, for calls not yet answered."""
        self.image_data: dict[str, bytes] = {}
        """The bytes of the images user messages may carry, by SHA-256: put here before the
        message that carries them is added (when it is sent, or before a rebuild)."""

    def set_system_prompt(self, text: str) -> None:
        """Replace the system prompt (between turns only: the skills catalog changed). A no-op
        when it is the same text, so its cached encodings stay."""
        if self.messages[0].content != text:
            self.messages[0] = Message(role="system", content=text)

    @property
    def system_prompt(self) -> str:
        return self.messages[0].content

    def add_user(self, text: str, context: str = "", images: Sequence[ImageRef] = ()) -> None:
        """Append a user message; its `images` are sent with it, their bytes taken from
        `image_data` (one whose bytes are gone is named in the text instead)."""
        self.close_open_calls()
        content = f"{context}\n\n{text}" if context else text
        content, parts = self._images(content, images)
        self.messages.append(Message(role="user", content=content, images=parts))

    def _images(self, content: str, images: Sequence[ImageRef]) -> tuple[str, list[ImagePart]]:
        """(the content, with a line for each image whose bytes are gone; the images whose
        bytes `image_data` has)."""
        parts: list[ImagePart] = []
        lost: list[str] = []
        for ref in images:
            data = self.image_data.get(ref.sha256)
            if data is None:
                lost.append(f"[image {ref.name} {ref.width}x{ref.height}: no longer stored]")
            else:
                parts.append(image_part(ref, data))
        return ("\n".join([content, *lost]) if lost else content), parts

    def add_assistant(self, text: str, tool_calls: Iterable[ToolCallRequest]) -> None:
        calls = list(tool_calls)
        self.messages.append(Message(role="assistant", content=text, tool_calls=calls))
        self._open_calls = {c.id: c.name for c in calls}

    def add_tool_result(self, call_id: str, output: str, images: Sequence[ImageRef] = ()) -> None:
        """Append a call's result; its `images` (a tool's, see `ToolCall.images`) are sent with
        it, their bytes taken from `image_data` as a user message's are."""
        name = self._open_calls.pop(call_id, "")
        content, parts = self._images(output, images)
        self.messages.append(
            Message(
                role="tool", content=content, tool_call_id=call_id, tool_name=name, images=parts
            )
        )

    def close_open_calls(self) -> None:
        """Answer every call still without a result, so the history stays valid for providers
        that require each tool call to be answered (after a cancel or a crash)."""
        for call_id in list(self._open_calls):
            self.add_tool_result(call_id, INTERRUPTED_RESULT)

    def replace_with_summary(self, text: str, *, kept: int) -> None:
        """Put the summary `text` in place of everything between the system prompt and the
        newest `kept` messages."""
        cut = max(len(self.messages) - kept, 1)
        self.messages[1:cut] = [summary_message(text, continues=kept > 0)]

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
                        self.add_tool_result(call.call_id, call.output, call.images)
                self.close_open_calls()
            pending_text, pending_calls = "", []

        for item in items:
            if item.parent_item_id:
                continue  # a subagent's: only its report (the task call's result) was sent
            if isinstance(item, UserMessage):
                flush()
                turn_index += 1
                self.add_user(item.text, item.context, item.images)
                step_key = None
            elif isinstance(item, Compaction) and item.step == "summary" and item.summary:
                flush()
                self.replace_with_summary(item.summary, kept=item.kept_messages)
            elif isinstance(item, AgentMessage) and item.superseded:
                continue  # a retried call's partial text: the model never saw it
            elif isinstance(item, AgentMessage | ToolCall):
                key = (turn_index, item.step)
                if key != step_key:
                    flush()
                    step_key = key
                if isinstance(item, AgentMessage):
                    # Sessions recorded before `superseded` existed: the last message of a
                    # retried step is the one the conversation kept.
                    pending_text = item.text
                else:
                    pending_calls.append(item)
        flush()
