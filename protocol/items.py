"""Items: the parts a turn is made of. Every item has an id that is stable for its lifetime.

An item is announced by `item_started`, may stream `item_delta`s, and ends with
`item_completed`, whose copy of the item is authoritative (clients replace what they built from
deltas with it). A client ignores item types it does not know (a newer daemon may add some).
"""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.enums import (
    CompactionStep,
    CompactionTrigger,
    NoticeCode,
    TurnEndStatus,
)

ToolStatus = Literal["running", "completed", "failed", "cancelled"]
NoticeLevel = Literal["info", "warning", "error"]
SubagentType = Literal["explore", "general"]
SubagentState = Literal["queued", "running", "done"]


class Item(Wire, frozen=True, kw_only=True, tag_field="type"):
    """A part of a turn; `type` tells which."""

    id: str
    """Stable for the item's lifetime: `item_delta`s and `item_completed` name it."""
    parent_item_id: str = ""
    """The `task` tool call whose subagent made this item; empty for the turn's own items.
    A client that nests shows it under that call; one that does not shows it in the turn,
    in order. Only the subagent's report (the task call's `output`) joins the agent's
    conversation."""


class ImageRef(Wire, frozen=True, kw_only=True):
    """An image attached to a user message (or returned by a tool), described: the bytes
    themselves stay in the daemon (sent to the model, kept in the data dir), never in events
    or snapshots."""

    name: str
    """What the image is called (its file name, as the model is told)."""
    mime_type: str
    """`image/png`, `image/jpeg`, `image/gif` or `image/webp`: what the model is sent."""
    size: int
    """Bytes of the image the model is sent."""
    sha256: str
    """Hex digest of those bytes."""
    width: int
    height: int
    """Pixels of the image the model is sent."""
    original_size: int = 0
    original_width: int = 0
    original_height: int = 0
    """The image as attached, when it was downscaled (or converted) to fit the model's
    limits; 0 when it is sent as it was attached."""


class UserMessage(Item, frozen=True, kw_only=True, tag="user_message"):
    """What the person sent: the turn's message, or one queued while it ran (then its id is
    the `inputId` of its `input_queued`)."""

    text: str
    context: str = ""
    """What was attached to the message for the model: editor state, mentioned files and
    folders (already capped), and the repository's instructions when they changed."""
    images: list[ImageRef] = []
    """Images sent with the message (from `turn/start`'s `images` and mentions of image
    files), in order; the model gets them in every later request of the session until a
    summary replaces the message."""


class AgentMessage(Item, frozen=True, kw_only=True, tag="agent_message"):
    """Assistant text. Streams `item_delta`s that append to `text`."""

    text: str = ""
    step: int = 0
    """The model call (1-based, within the turn) that produced it."""
    superseded: bool = False
    """The model call broke off after streaming this text and is being retried: the retry's
    own message replaces it and the model never saw it. Clients that showed the partial text
    remove it (or mark it as cut off)."""


class Reasoning(Item, frozen=True, kw_only=True, tag="reasoning"):
    """The model's reasoning, when the provider streams it. Streams `item_delta`s that append
    to `text`."""

    text: str = ""
    step: int = 0
    superseded: bool = False
    """As for `AgentMessage`: reasoning of a model call that broke off and is being retried."""


class Subagent(Wire, frozen=True, kw_only=True):
    """The subagent a `task` call started: what it is, and how far it got."""

    description: str
    """What it does, in a few words (the call's `description`)."""
    subagent_type: SubagentType = "explore"
    """`explore` (read-only tools) or `general` (may edit files and run commands)."""
    model: str = ""
    """The model it calls."""
    state: SubagentState = "queued"
    """`queued` (waiting for one of the subagents that may run at once to finish),
    `running`, or `done` (its report is the call's `output`)."""
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    """Tokens its model calls took; they count in the turn's summary too."""


class ToolCall(Item, frozen=True, kw_only=True, tag="tool_call"):
    """One tool call the model asked for, with its outcome once completed.

    `arguments` is the raw JSON text the model produced (it may be invalid: then `status` is
    `failed` and `output` says why). Output deltas stream command output while it runs.
    """

    call_id: str
    tool: str
    arguments: str
    status: ToolStatus = "running"
    output: str = ""
    """What the model is told: the tool's result, or the error it can act on."""
    step: int = 0
    """The model call that asked for it; calls of one step answer one assistant message."""
    exit_code: int | None = None
    """For a command that ran in the foreground (`run_command`): how it exited, 0 for
    success; negative when a signal ended it (-15: SIGTERM, as after a timeout). None for
    every other call, a background start included. A non-zero exit is still a `completed`
    call (the model is told the code and acts on it): clients show it as a failure."""
    diff: str = ""
    """For an edit that changed a file (`edit_file`, `write_file`): the unified diff it made,
    paths relative to the workspace (`a/x.py` and `b/x.py`; `/dev/null` before a created
    file), capped like `output`. Empty for every other call and for an edit that changed
    nothing. Set when the call completes, whatever the permission mode."""
    duration_seconds: float = 0.0
    """How long the tool ran, set when the call completes (waiting for an approval is not
    counted; 0 for a call that did not run)."""
    subagent: Subagent | None = None
    """For a `task` call: its subagent, set by `item_updated` while it is queued and
    running, and on completion. The subagent's own items name this call's id as their
    `parentItemId`."""
    images: list[ImageRef] = []
    """Images the tool returned (an MCP tool's `image` blocks), made fit for the model as a
    message's images are, in order; set when the call completes. The model gets them with
    the result in every later request of the session until a summary replaces it."""


class FileChange(Wire, frozen=True, kw_only=True):
    """One file a turn changed, with its line counts."""

    path: str
    """Relative to the workspace."""
    added: int = 0
    removed: int = 0
    created: bool = False
    deleted: bool = False


class TurnSummary(Item, frozen=True, kw_only=True, tag="turn_summary"):
    """The last item of every turn: how it ended and what it cost and changed."""

    stop_reason: TurnEndStatus
    """How the turn ended: the `status` of its `turn_completed`."""
    duration_seconds: float
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_estimated: bool = False
    model_calls: int = 0
    files_changed: list[FileChange] = []


class Compaction(Item, frozen=True, kw_only=True, tag="compaction"):
    """The conversation was made smaller to fit the context budget."""

    step: CompactionStep
    """`earlier_turns` or `old_tool_results` (outputs replaced by stubs), or `summary` (older
    history summarised by the model)."""
    trigger: CompactionTrigger = "auto"
    """`auto` (the context budget) or `manual` (`session/compact`)."""
    tokens_before: int
    tokens_after: int
    budget: int = 0
    summary: str = ""
    kept_messages: int = 0
    """After a summary: how many recent messages were kept verbatim."""


class Notice(Item, frozen=True, kw_only=True, tag="notice"):
    """Something the user should know: a failed model call and how to fix it, a retry, a pause."""

    level: NoticeLevel = "info"
    message: str
    code: NoticeCode = ""
    """What it is about, for a client that treats some notices specially: a `TurnError` code
    when a model call or the settings failed the turn (`model_*`, `config_invalid`),
    `compaction_failed` (a summary of the history could not be made), `compaction_skipped`
    (a manual compaction would not have made the history smaller), `step_budget` (the turn
    paused), `output_limit` (a reply was cut off and the model asked to continue),
    `todo_reminder`, `model_stream` (a warning about the model's stream), `workspace_config`
    (settings of the workspace's config were ignored), `workspace_trust` (the workspace is
    not trusted, so language servers run restricted: `workspace/trust` trusts it); empty for
    none of these."""


AnyItem = UserMessage | AgentMessage | Reasoning | ToolCall | Notice | TurnSummary | Compaction
