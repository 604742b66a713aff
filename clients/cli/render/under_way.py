"""What a turn has under way while it runs, as the renderer shows it: the tool calls running
(a subagent's under its task call, with the last lines of a command's output), reasoning as
it streams, the wait for a model call's first token and a retry's countdown.

Drawn two ways: as lines of the live region (`status_lines`, styled) and as the one plain
line a host draws itself (`activity`)."""

import math
from typing import TYPE_CHECKING

import msgspec

from tether.clients.core.text import (
    SPINNER,
    describe_call,
    nested_prefix,
    output_tail,
    progress_text,
    visible,
)
from tether.protocol.events import ToolProgress
from tether.protocol.items import AnyItem, ToolCall

if TYPE_CHECKING:
    from tether.clients.cli.render.styled import Painter

OUTPUT_KEPT = 8_000
"""Characters of a running command's streamed output kept for its tail."""
REASONING_LINES = 3


class Call:
    """A tool call started and not completed."""

    def __init__(self, item: ToolCall, started: float) -> None:
        self.item = item
        self.started = started
        self.output = ""
        self.progress: ToolProgress | None = None
        """The last progress its tool reported."""

    def progress_parts(self) -> list[str]:
        return [progress_text(self.progress)] if self.progress is not None else []


class UnderWay:
    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        """Tool calls started and not completed (a subagent's among them)."""
        self.subagents: dict[str, str] = {}
        """Task calls seen, by item id: the description of their subagent."""
        self.reasoning: dict[str, tuple[float, str]] = {}
        """Reasoning being streamed: when it started, the text so far."""
        self.approvals: set[str] = set()
        """Approvals asked and not resolved."""
        self.waiting_since: float | None = None
        """A model call is under way and has not sent its first token."""
        self.retry: tuple[float, str] | None = None
        """A retry's wait: when it ends, what to say."""

    @property
    def moving(self) -> bool:
        """Whether anything shown moves with time (spinners, elapsed times, countdowns)."""
        moving = bool(self.calls or self.reasoning) or self.waiting_since is not None
        return moving or self.retry is not None

    def clear(self) -> None:
        """The turn has ended: nothing is under way."""
        self.reasoning.clear()
        self.calls.clear()
        self.approvals.clear()
        self.waiting_since = None
        self.retry = None

    def start_call(self, call: ToolCall, now: float) -> None:
        self.calls[call.id] = Call(call, now)
        if call.tool == "task":
            self.subagents[call.id] = task_description(call)

    def add_output(self, item_id: str, delta: str) -> bool:
        """Add streamed output to a running call or reasoning; False if `item_id` is
        neither."""
        call = self.calls.get(item_id)
        if call is not None:
            call.output = (call.output + delta)[-OUTPUT_KEPT:]
            return True
        reasoning = self.reasoning.get(item_id)
        if reasoning is not None:
            self.reasoning[item_id] = (reasoning[0], (reasoning[1] + delta)[-OUTPUT_KEPT:])
            return True
        return False

    def report_progress(self, item_id: str, report: ToolProgress) -> None:
        call = self.calls.get(item_id)
        if call is not None:
            call.progress = report

    def nesting(self, item: AnyItem) -> str:
        """The prefix of a line about `item`: empty for the turn's own items, the subagent's
        mark and description for one of a subagent's."""
        if not item.parent_item_id:
            return ""
        return nested_prefix(self.subagents.get(item.parent_item_id, ""))

    def calls_in_order(self) -> list[Call]:
        """The running calls, each subagent's right under its task call."""
        calls = list(self.calls.values())
        ordered: list[Call] = []
        for call in calls:
            if call.item.parent_item_id in self.calls:
                continue
            ordered.append(call)
            ordered += [c for c in calls if c.item.parent_item_id == call.item.id]
        return ordered

    def activity(self, now: float, *, replying: bool) -> str | None:
        """One line of plain text, or None when nothing is under way; `replying`: a reply
        is being written. See `Renderer.activity`."""
        frame = SPINNER[int(now * 10) % len(SPINNER)]
        if self.retry is not None:
            until, reason = self.retry
            return f"↻ retrying in {max(0, math.ceil(until - now))} s {reason}"
        if self.calls:
            call = list(self.calls.values())[-1]
            what = f"{self.nesting(call.item).lstrip()}{describe_call(call.item)}"
            parts = [f"{frame} {what}", f"{max(0.0, now - call.started):.1f} s"]
            parts += call.progress_parts()
            parts += output_tail(call.output, 1)
            if len(self.calls) > 1:
                parts.append(f"{len(self.calls) - 1} more running")
            return " · ".join(parts)
        if self.reasoning:
            started, _ = list(self.reasoning.values())[-1]
            return f"✻ reasoning… {max(0.0, now - started):.0f} s"
        if replying:
            return f"{frame} replying…"
        if self.waiting_since is not None and not self.approvals:
            return f"{frame} thinking… {max(0.0, now - self.waiting_since):.0f} s"
        return None

    def status_lines(self, painter: "Painter", columns: int, now: float) -> list[str]:
        """The live region's lines for what is under way, styled, each cut to `columns`."""
        frame = SPINNER[int(now * 10) % len(SPINNER)]
        width = columns - 1
        lines: list[str] = []
        for started, text in self.reasoning.values():
            thought = [line for line in text.rstrip().split("\n") if line.strip()]
            lines.append(painter.line(f"✻ reasoning… {now - started:.0f} s", "dim", width))
            lines += [
                painter.line(f"  {visible(line)}", "dim italic", width)
                for line in thought[-REASONING_LINES:]
            ]
        for call in self.calls_in_order():
            nested = "    " if call.item.parent_item_id in self.calls else ""
            elapsed = f" · {now - call.started:.1f} s"
            sub = call.item.subagent
            if sub is not None and sub.state == "queued":
                elapsed = f" · queued{elapsed}"
            elapsed += "".join(f" · {part}" for part in call.progress_parts())
            spans = [
                (f"{nested}{frame} ", "cyan"),
                (describe_call(call.item), ""),
                (elapsed, "dim"),
            ]
            lines.append(painter.spans(spans, width))
            tail = output_tail(call.output)
            lines += [painter.line(f"{nested}  │ {line}", "dim", width) for line in tail]
        if self.retry is not None:
            until, reason = self.retry
            left = max(0, math.ceil(until - now))
            lines.append(painter.line(f"↻ retrying in {left} s {reason}", "yellow", width))
        elif self.waiting_since is not None and not self.calls and not self.approvals:
            waited = f"thinking… {max(0.0, now - self.waiting_since):.0f} s"
            lines.append(painter.spans([(f"{frame} ", "cyan"), (waited, "dim")], width))
        return lines


def task_description(call: ToolCall) -> str:
    """The description of a task call's subagent (from the call's arguments while it has no
    `subagent` yet)."""
    if call.subagent is not None:
        return call.subagent.description
    try:
        args = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError:
        return ""
    description = args.get("description") if isinstance(args, dict) else None  # type: ignore[union-attr]
    return description if isinstance(description, str) else ""
