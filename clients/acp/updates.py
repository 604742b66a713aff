"""What a tether session's events and snapshot look like as ACP `session/update`s.

`Translator` holds what one session's stream needs to be remembered between events (which
item each delta belongs to, the text each message has streamed, which tool calls the editor
was told of). It does no I/O beyond reading an edited file for its whole text (see `diffs`)
and asking for the bytes of a tool's images (`images`, which asks the daemon).

    tether                                   ACP update
    user_message item (not the editor's)     user_message_chunk
    agent_message item / its deltas          agent_message_chunk (messageId: the item id)
    reasoning item / its deltas              agent_thought_chunk
    tool_call item started                   tool_call (pending; kind, title, locations,
                                             rawInput)
    its first output delta, or its approval  tool_call_update in_progress
    allowed
    its progress (an item_delta's progress)  tool_call_update in_progress, content: one text
                                             block saying how far it has got
    tool_call item completed                 tool_call_update completed|failed, with the
                                             output as text, the edit as diff content and
                                             the images it returned as image content
    notice item (warning, error)             agent_message_chunk, quoted
    todos_updated                            plan (every entry medium priority)
    context_updated                          usage_update (used, size: the budget)
    session_renamed                          session_info_update (title)

A replay (`snapshot`) gives each item as it stands, a tool call as one `tool_call` with its
final status: folded, the live stream and the replay of a turn say the same.
"""

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tether.clients.acp import diffs
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ContextMeter,
    ContextUpdated,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    SessionRenamed,
    TodoEntry,
    TodosUpdated,
    ToolProgress,
)
from tether.protocol.items import AgentMessage, AnyItem, Notice, Reasoning, ToolCall, UserMessage
from tether.protocol.session import SessionSnapshot

JSON = dict[str, Any]

TOOL_KINDS = {
    "read_file": "read",
    "list_dir": "read",
    "grep": "search",
    "glob": "search",
    "find_definition": "search",
    "find_references": "search",
    "symbols": "search",
    "hover": "search",
    "edit_file": "edit",
    "write_file": "edit",
    "rename_symbol": "edit",
    "run_command": "execute",
    "command_output": "execute",
    "command_kill": "execute",
    "todo_write": "think",
}
"""ACP's tool kind for each built-in tool; any other tool is `other`."""


def arguments_of(item: ToolCall) -> dict[str, Any] | None:
    """The call's arguments as an object, or None when the model's JSON was not one."""
    try:
        value: object = json.loads(item.arguments) if item.arguments.strip() else {}
    except ValueError:
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def tool_title(item: ToolCall) -> str:
    """What the call does, in a few words (Markdown: the editor renders titles)."""
    args = arguments_of(item) or {}

    def arg(name: str) -> str:
        value = args.get(name)
        return value if isinstance(value, str) else ""

    match item.tool:
        case "read_file":
            return f"Read {arg('path')}"
        case "list_dir":
            return f"List {arg('path') or '.'}"
        case "grep":
            where = f" in {arg('path')}" if arg("path") else ""
            return f"Search `{arg('pattern')}`{where}"
        case "glob":
            return f"Find `{arg('pattern')}`"
        case "find_definition" | "find_references" | "hover":
            what = {"find_definition": "Definition of", "find_references": "Uses of"}
            return f"{what.get(item.tool, 'Hover')} `{arg('symbol')}` ({_line_of(args)})"
        case "rename_symbol":
            return f"Rename `{arg('symbol')}` to `{arg('new_name')}` ({_line_of(args)})"
        case "symbols":
            return f"Symbols `{arg('query')}`" if arg("query") else f"Outline of {arg('path')}"
        case "edit_file":
            return f"Edit {arg('path')}"
        case "write_file":
            return f"Write {arg('path')}"
        case "run_command":
            return f"Run `{arg('command')}`"
        case "command_output":
            return f"Output of {arg('id')}"
        case "command_kill":
            return f"Stop {arg('id')}"
        case "todo_write":
            return "Update the plan"
        case _:
            return item.tool


def _line_of(args: dict[str, Any]) -> str:
    path, line = args.get("path"), args.get("line")
    return f"{path}:{line}" if isinstance(path, str) and isinstance(line, int) else "?"


def tool_status(item: ToolCall) -> str:
    if item.status == "running":
        return "pending"
    if item.status == "completed" and item.exit_code in (None, 0):
        return "completed"
    return "failed"  # a failed, cancelled or denied call, or a command that exited non-zero


def _locations(item: ToolCall, workspace: Path) -> list[JSON]:
    path = (arguments_of(item) or {}).get("path")
    if not isinstance(path, str) or not path:
        return []
    return [{"path": str(workspace / path)}]


ImageBytes = Callable[[str], bytes | None]
"""The bytes of the session's image with this SHA-256 (None: they cannot be had)."""


def tool_content(item: ToolCall, workspace: Path, images: ImageBytes | None = None) -> list[JSON]:
    """A completed call's content: its diff when it changed files, else its output, then the
    images it returned (whose line the output has) when `images` gives their bytes."""
    if item.diff:
        return _diff_content(diffs.changes(item.diff, workspace))
    content: list[JSON] = []
    text = item.output
    if text and item.tool == "run_command":
        fence = "````" if "```" in text else "```"
        text = f"{fence}\n{text.rstrip()}\n{fence}"
    if text:
        content.append(_text_content(text))
    for ref in item.images:
        data = images(ref.sha256) if images is not None else None
        if data is not None:
            image = {
                "type": "image",
                "data": base64.b64encode(data).decode(),
                "mimeType": ref.mime_type,
            }
            content.append({"type": "content", "content": image})
    return content


def tool_call(
    item: ToolCall, workspace: Path, *, complete: bool, images: ImageBytes | None = None
) -> JSON:
    """The `tool_call` announcing `item`; with its final status and content when `complete`."""
    arguments = arguments_of(item)
    update: JSON = {
        "sessionUpdate": "tool_call",
        "toolCallId": item.id,
        "title": tool_title(item),
        "kind": TOOL_KINDS.get(item.tool, "other"),
        "status": tool_status(item) if complete else "pending",
        "locations": _locations(item, workspace),
        "rawInput": arguments if arguments is not None else {"arguments": item.arguments},
    }
    if complete:
        update["content"] = tool_content(item, workspace, images)
    return update


def progress_text(report: ToolProgress) -> str:
    """`Progress: 3 of 10 (indexing)`, `Progress: 7` without a total or message."""
    text = f"Progress: {report.progress:g}"
    if report.total is not None and report.total > 0:
        text += f" of {report.total:g}"
    return f"{text} ({report.message})" if report.message else text


def tool_completed(item: ToolCall, workspace: Path, images: ImageBytes | None = None) -> JSON:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": item.id,
        "status": tool_status(item),
        "content": tool_content(item, workspace, images),
    }


def _diff_content(changes: list[diffs.Change]) -> list[JSON]:
    return [
        {
            "type": "diff",
            "path": str(change.path),
            "oldText": change.old_text,
            "newText": change.new_text,
        }
        for change in changes
    ]


def permission_tool_call(approval: ApprovalRequest, item: ToolCall | None, workspace: Path) -> JSON:
    """The `toolCall` of a `session/request_permission`: what waits, with what it would do
    (an edit as `diff` content, which an editor shows in its own diff view)."""
    call: JSON = {"toolCallId": approval.item_id, "status": "pending"}
    if item is not None:
        call["title"] = tool_title(item)
        call["kind"] = TOOL_KINDS.get(item.tool, "other")
    content: list[JSON] = []
    if approval.preview:
        content.extend(_diff_content(diffs.pending(approval.preview, workspace)))
    elif approval.command:
        content.append(_text_content(f"```sh\n{approval.command}\n```"))
    if approval.reason:
        content.append(_text_content(approval.reason))
    call["content"] = content
    return call


def _text_content(text: str) -> JSON:
    return {"type": "content", "content": {"type": "text", "text": text}}


def plan(todos: list[TodoEntry]) -> JSON:
    return {
        "sessionUpdate": "plan",
        "entries": [
            {"content": todo.content, "status": todo.status, "priority": "medium"} for todo in todos
        ],
    }


def usage(context: ContextMeter) -> JSON | None:
    if context.budget <= 0:
        return None
    return {"sessionUpdate": "usage_update", "used": context.used, "size": context.budget}


def _chunk(kind: str, item_id: str, text: str) -> JSON:
    return {
        "sessionUpdate": kind,
        "messageId": item_id,
        "content": {"type": "text", "text": text},
    }


def _notice_text(item: Notice) -> str:
    return f"\n\n> **{item.level}:** {item.message}\n\n"


class Translator:
    """One session's events into updates; `skip_inputs` names the user messages the editor
    sent itself (it shows them already); `images` reads the bytes of a tool's images."""

    def __init__(self, workspace: Path, images: ImageBytes | None = None) -> None:
        self.workspace = workspace
        self.images = images
        self.skip_inputs: set[str] = set()
        self._streamed: dict[str, str] = {}
        """Text sent so far of each agent message and reasoning item, by item id."""
        self._chunk_kind: dict[str, str] = {}
        self._tools: dict[str, ToolCall] = {}
        """Tool calls the editor was told of and that have not completed, by item id."""
        self._running: set[str] = set()
        self._approvals: dict[str, str] = {}
        """The tool call item of each pending approval, by approval id."""

    def tool_item(self, item_id: str) -> ToolCall | None:
        return self._tools.get(item_id)

    def snapshot(self, snapshot: SessionSnapshot) -> list[JSON]:
        """Every item of the session as it stands, then its plan and context."""
        updates: list[JSON] = []
        for turn in snapshot.turns:
            for item in turn.items:
                updates.extend(self._item(item, replay=True))
        for approval in snapshot.pending_approvals:
            self._approvals[approval.id] = approval.item_id
        if snapshot.todos:
            updates.append(plan(snapshot.todos))
        meter = usage(snapshot.context)
        if meter is not None:
            updates.append(meter)
        return updates

    def resume(self, snapshot: SessionSnapshot) -> None:
        """Take the state of a snapshot the editor is not shown (`session/resume`): items
        still running are announced in full when they complete."""
        for approval in snapshot.pending_approvals:
            self._approvals[approval.id] = approval.item_id
        for turn in snapshot.turns:
            for item in turn.items:
                if isinstance(item, AgentMessage | Reasoning):
                    self._chunk_kind[item.id] = (
                        "agent_message_chunk"
                        if isinstance(item, AgentMessage)
                        else "agent_thought_chunk"
                    )
                    self._streamed[item.id] = item.text

    def event(self, event: AnyEvent) -> list[JSON]:
        match event:
            case ItemStarted(item=item):
                return self._item(item, replay=False)
            case ItemDelta(item_id=item_id, progress=ToolProgress() as report):
                return self._progress(item_id, report)
            case ItemDelta(item_id=item_id, delta=delta):
                return self._delta(item_id, delta)
            case ItemCompleted(item=item):
                return self._completed(item)
            case ApprovalRequested(approval=approval):
                self._approvals[approval.id] = approval.item_id
            case ApprovalResolved(approval_id=approval_id, decision=decision):
                item_id = self._approvals.pop(approval_id, None)
                if decision == "allow" and item_id is not None:
                    return self._in_progress(item_id)
            case TodosUpdated(todos=todos):
                return [plan(todos)]
            case ContextUpdated(context=context):
                meter = usage(context)
                return [meter] if meter is not None else []
            case SessionRenamed(title=title):
                return [{"sessionUpdate": "session_info_update", "title": title}]
            case _:
                pass
        return []

    def _item(self, item: AnyItem, *, replay: bool) -> list[JSON]:
        """An item appearing (live: `item_started`) or as it stands (replay)."""
        match item:
            case UserMessage(id=item_id, text=text):
                if not replay and item_id in self.skip_inputs:
                    return []
                return [_chunk("user_message_chunk", item_id, text)]
            case AgentMessage() | Reasoning():
                kind = (
                    "agent_message_chunk"
                    if isinstance(item, AgentMessage)
                    else ("agent_thought_chunk")
                )
                if item.superseded:
                    return []
                self._chunk_kind[item.id] = kind
                self._streamed[item.id] = item.text
                return [_chunk(kind, item.id, item.text)] if item.text else []
            case ToolCall():
                complete = item.status != "running"
                if not complete:
                    self._tools[item.id] = item
                update = tool_call(item, self.workspace, complete=complete, images=self.images)
                if not complete and item.output:
                    self._running.add(item.id)
                    update["status"] = "in_progress"
                return [update]
            case Notice(level=level) if replay and level != "info":
                return [_chunk("agent_message_chunk", item.id, _notice_text(item))]
            case _:
                return []

    def _delta(self, item_id: str, delta: str) -> list[JSON]:
        kind = self._chunk_kind.get(item_id)
        if kind is not None:
            self._streamed[item_id] = self._streamed.get(item_id, "") + delta
            return [_chunk(kind, item_id, delta)]
        if item_id in self._tools:
            return self._in_progress(item_id)
        return []

    def _progress(self, item_id: str, report: ToolProgress) -> list[JSON]:
        """A running call's progress; its content until the next report or its end."""
        if item_id not in self._tools:
            return []
        self._running.add(item_id)
        return [
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": item_id,
                "status": "in_progress",
                "content": [_text_content(progress_text(report))],
            }
        ]

    def _in_progress(self, item_id: str) -> list[JSON]:
        if item_id not in self._tools or item_id in self._running:
            return []
        self._running.add(item_id)
        return [
            {"sessionUpdate": "tool_call_update", "toolCallId": item_id, "status": "in_progress"}
        ]

    def _completed(self, item: AnyItem) -> list[JSON]:
        match item:
            case AgentMessage() | Reasoning():
                kind = self._chunk_kind.pop(item.id, None)
                streamed = self._streamed.pop(item.id, "")
                if kind is None or item.superseded or not item.text.startswith(streamed):
                    return []
                rest = item.text[len(streamed) :]
                return [_chunk(kind, item.id, rest)] if rest else []
            case ToolCall():
                self._running.discard(item.id)
                if self._tools.pop(item.id, None) is None:
                    return [tool_call(item, self.workspace, complete=True, images=self.images)]
                return [tool_completed(item, self.workspace, self.images)]
            case Notice(level=level) if level != "info":
                return [_chunk("agent_message_chunk", item.id, _notice_text(item))]
            case _:
                return []
