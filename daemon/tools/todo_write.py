"""todo_write: the agent's plan as a checklist, shared with every attached client.

The list is session state held by a `TodoBoard` (the session registers one in the tool
services under "todos"); each call replaces the whole list, and the board announces it
(`todos_updated`) and keeps it for attach snapshots.
"""

from typing import Annotated, ClassVar, Literal, Protocol, runtime_checkable

import msgspec

from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolParams
from tether.protocol.events import TodoEntry

TODOS_SERVICE = "todos"
"""The key of the session's `TodoBoard` in `ToolContext.services`."""
MAX_TODOS = 100

TodoStatus = Literal["pending", "in_progress", "completed"]
_MARKS: dict[TodoStatus, str] = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


@runtime_checkable
class TodoBoard(Protocol):
    def set(self, todos: list[TodoEntry]) -> None:
        """Replace the session's todo list (and tell every attached client)."""
        ...


class Todo(msgspec.Struct, frozen=True, kw_only=True):
    content: Annotated[
        str, msgspec.Meta(min_length=1, description="The step, in the imperative (one line).")
    ]
    status: Annotated[
        TodoStatus,
        msgspec.Meta(description="pending, in_progress (at most one at a time) or completed."),
    ]


class TodoWriteParams(ToolParams, frozen=True, kw_only=True):
    todos: Annotated[
        list[Todo],
        msgspec.Meta(
            max_length=MAX_TODOS,
            description="The whole list, in order; it replaces the previous one.",
        ),
    ]


class TodoWrite:
    name: ClassVar[str] = "todo_write"
    description: ClassVar[str] = (
        "Keep a todo list for multi-step work, visible to the user. Send the full list each "
        "time (it replaces the previous one): each item has content and a status (pending, "
        "in_progress, completed); at most one item is in_progress. Mark an item completed as "
        f"soon as it is done. At most {MAX_TODOS} items."
    )
    kind: ClassVar[ToolKind] = "other"
    params: ClassVar[type[ToolParams]] = TodoWriteParams

    async def run(self, params: TodoWriteParams, ctx: ToolContext) -> str:
        in_progress = [todo.content for todo in params.todos if todo.status == "in_progress"]
        if len(in_progress) > 1:
            raise ToolFailure(
                f"{len(in_progress)} items are in_progress ({'; '.join(in_progress)}); at most "
                "one may be. Mark the others pending or completed."
            )
        board = ctx.services.get(TODOS_SERVICE)
        if not isinstance(board, TodoBoard):
            raise ToolFailure("The todo list is not available here.")
        board.set([TodoEntry(content=todo.content, status=todo.status) for todo in params.todos])
        if not params.todos:
            return "The todo list is now empty."
        done = sum(1 for todo in params.todos if todo.status == "completed")
        lines = [f"Todo list updated ({done} of {len(params.todos)} completed):"]
        lines += [f"{_MARKS[todo.status]} {todo.content}" for todo in params.todos]
        return "\n".join(lines)
