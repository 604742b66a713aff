"""Printing a session's events for a person (or, with --json, for a program).

Assistant text streams inline to stdout; each tool call is one line when it starts, marked
with how it ended; notices (errors, pauses) go to stderr so a pipeline keeps only the answer,
and so does the reason a turn did not complete, unless a notice already said it.

A reply whose model call broke off and is retried completes as `superseded`. On a terminal its
streamed text is erased (when it is still on screen and nothing was printed after it; else a
line on stderr says the retry replaces it). Into a pipe or a file, text cannot be taken back,
so each reply is written whole when it completes, and a superseded one not at all.

Everything the daemon relays (model text, commands, paths, diffs, messages) passes through
`visible` before it reaches the terminal: a control character could otherwise move the
cursor, erase a line or hide the rest of an approval prompt, and a bidi control could reorder
what a person reads.
"""

import os
import sys
import unicodedata
from collections.abc import Callable
from typing import TextIO

import msgspec

from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    InputDropped,
    InputQueued,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
    TurnCompleted,
)
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Notice,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.methods import SessionEventParams
from tether.protocol.session import SessionSnapshot

_json = msgspec.json.Encoder()
MAX_ARGS_SHOWN = 120


def visible(text: str, *, multiline: bool = False) -> str:
    """`text` with every character that a terminal would not show as itself written as an
    escape (`\\x1b`, `\\r`, `\\x07`, `\\u202e`): control characters (escape sequences,
    carriage returns, bells, …), bidi controls, zero-width and other format characters, line
    and paragraph separators. Tabs and spaces stay; newlines (and a CR right before one) stay
    only when `multiline`."""
    if text.isprintable():
        return text
    out: list[str] = []
    for index, ch in enumerate(text):
        shown = ch.isprintable() or ch == "\t" or unicodedata.category(ch) == "Zs"
        if not shown and multiline:
            shown = ch == "\n" or (ch == "\r" and text[index + 1 : index + 2] == "\n")
        out.append(ch if shown else ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def describe_call(item: ToolCall) -> str:
    try:
        args = msgspec.json.decode(item.arguments or "{}")
    except msgspec.DecodeError:
        shown = item.arguments
    else:
        if isinstance(args, dict):
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())  # type: ignore[union-attr]
        else:
            shown = repr(args)
    shown = visible(shown)
    if len(shown) > MAX_ARGS_SHOWN:
        shown = shown[: MAX_ARGS_SHOWN - 1] + "…"
    return f"{visible(item.tool)}({shown})"


def describe_subject(approval: ApprovalRequest) -> str:
    """What an approval is about (its command, else its path, else its arguments) on one
    line, escaped."""
    return visible(approval.command or approval.path or approval.arguments)


def describe_approval(approval: ApprovalRequest) -> str:
    """The approval prompt's lines: what, why, the diff, what "always" would allow. Every
    part is escaped; a command's further lines are shown below it, each behind a bar, so that
    none can pass for one of the prompt's own lines."""
    subject = approval.command or approval.path or approval.arguments
    first, *rest = subject.split("\n")
    lines = [f"tether: approval needed [{approval.id}] {visible(approval.tool)}: {visible(first)}"]
    lines += [f"  │ {visible(line)}" for line in rest]
    lines.append(f"  why: {visible(approval.reason)}")
    if approval.preview:
        lines.append(visible(approval.preview, multiline=True).rstrip("\r\n"))
    if approval.always_rule:
        lines.append(f"  always would allow: {visible(approval.always_rule)}")
    return "\n".join(lines) + "\n"


def describe_summary(summary: TurnSummary) -> str:
    approx = "~" if summary.tokens_estimated else ""
    parts = [
        f"{summary.stop_reason} in {summary.duration_seconds:.1f} s",
        f"{summary.model_calls} model call{'s' if summary.model_calls != 1 else ''}",
        f"{approx}{summary.input_tokens:,} tokens in / {approx}{summary.output_tokens:,} out",
    ]
    if summary.files_changed:
        added = sum(f.added for f in summary.files_changed)
        removed = sum(f.removed for f in summary.files_changed)
        count = len(summary.files_changed)
        parts.append(f"{count} file{'s' if count != 1 else ''} changed (+{added} -{removed})")
    return " · ".join(parts)


def screen_rows(text: str, columns: int) -> int:
    """Rows of a terminal `columns` wide that `text`, written from the start of a row, spans
    up to the cursor (wide characters take two cells, combining ones none)."""
    rows = 0
    for line in text.split("\n"):
        width = sum(
            0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
            for ch in line.expandtabs()
        )
        rows += max(1, -(-width // max(columns, 1)))
    return rows


def _terminal_size(out: TextIO) -> Callable[[], tuple[int, int]]:
    def size() -> tuple[int, int]:
        try:
            columns, lines = os.get_terminal_size(out.fileno())
        except (OSError, ValueError, AttributeError):
            return 80, 24
        return columns, lines

    return size


class Renderer:
    def __init__(
        self,
        *,
        json_mode: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
        live: bool | None = None,
        terminal_size: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """`live`: stream text as it arrives (default: when `out` is a terminal), else write
        each reply when it completes. `terminal_size` gives (columns, lines) for erasing."""
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.out.isatty() if live is None else live
        self._terminal_size = terminal_size or _terminal_size(self.out)
        self._mid_line = False
        self._streamed: dict[str, list[str]] = {}
        """Agent messages being streamed: the text received so far."""
        self._erasable: str | None = None
        """The streamed message whose text is all that was printed since it started."""
        self._said: set[str] = set()
        """Error notices printed, so that a turn's error repeating one is not printed twice."""

    def _newline(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False

    def event(self, params: SessionEventParams) -> None:
        if self.json_mode:
            self.out.write(_json.encode(params).decode() + "\n")
            self.out.flush()
            return
        self._event(params.event)
        self.out.flush()

    def _event(self, event: AnyEvent) -> None:
        match event:
            case ItemDelta(item_id=item_id, delta=delta):
                parts = self._streamed.get(item_id)
                if parts is not None:
                    parts.append(delta)
                    if self.live:
                        self.out.write(visible(delta, multiline=True))
                        self._mid_line = not delta.endswith("\n")
            case ItemStarted(item=AgentMessage(id=item_id)):
                self._streamed[item_id] = []
                if self.live:
                    self._newline()
                    self._erasable = item_id
            case ItemStarted(item=ToolCall() as call):
                self._newline()
                self._erasable = None
                self.out.write(f"→ {describe_call(call)}\n")
            case ItemCompleted(item=item):
                self._completed(item)
            case TurnCompleted(status=status, error=error):
                for parts in self._streamed.values():  # replies the turn ended without
                    if not self.live and parts:
                        self._newline()
                        text = "".join(parts)
                        self.out.write(visible(text, multiline=True))
                        self._mid_line = not text.endswith("\n")
                self._streamed.clear()
                self._newline()
                if error is not None and error.message not in self._said:
                    message = error.message
                    self._say(f"error: {message}" if status == "failed" else message)
            case ApprovalRequested(approval=approval):
                self._newline()
                self._approval(approval)
            case ApprovalResolved(decision=decision, by=by, message=message):
                verb = "allowed" if decision == "allow" else "denied"
                why = f": {message}" if message else ""
                self._say(visible(f"  {verb} by {by}{why}"))
            case InputQueued(text=text, by=by):
                who = f" from {by}" if by else ""
                self._say(visible(f"(queued{who}, joins at the next step) {text}"))
            case InputDropped(input_ids=ids, reason=reason):
                self._say(visible(f"({len(ids)} queued message(s) dropped: {reason})"))
            case ModelRetry(attempt=attempt, max_attempts=most, delay_seconds=delay, reason=why):
                self._say(visible(f"retrying in {delay:.0f} s ({attempt}/{most}): {why}"))
            case _:
                pass

    def _say(self, line: str) -> None:
        self._newline()
        self._erasable = None
        self.err.write(f"tether: {line}\n")
        self.err.flush()

    def _agent_message(self, item: AgentMessage) -> None:
        parts = self._streamed.pop(item.id, None)
        shown = self.live and parts is not None
        if item.superseded:
            if shown and not (
                self._erasable == item.id
                and self._erase(visible("".join(parts or []), multiline=True))
            ):
                self._say("(the reply above broke off; the retried reply replaces it)")
            return
        if not shown:
            self._newline()
            self.out.write(visible(item.text, multiline=True))
            self._mid_line = not item.text.endswith("\n")
        self._erasable = None
        self._newline()

    def _erase(self, text: str) -> bool:
        """Erase `text`, printed from the start of a row to the cursor; False when part of it
        has scrolled out of reach."""
        columns, lines = self._terminal_size()
        rows = screen_rows(text, columns)
        if rows > lines:
            return False
        up = f"\x1b[{rows - 1}A" if rows > 1 else ""
        self.out.write(f"\r{up}\x1b[J")
        self._mid_line = False
        self._erasable = None
        return True

    def _approval(self, approval: ApprovalRequest) -> None:
        self._erasable = None
        self.err.write(describe_approval(approval))
        self.err.flush()

    def _completed(self, item: AnyItem) -> None:
        match item:
            case AgentMessage() as message:
                self._agent_message(message)
            case ToolCall(status=status, output=output) if status != "completed":
                self._newline()
                self._erasable = None
                first = output.strip().splitlines()[0] if output.strip() else ""
                self.out.write(f"  ✗ {status}: {visible(first[:200])}\n")
            case Notice(level=level, message=message):
                self._newline()
                self._erasable = None
                if level == "error":
                    self._said.add(message)
                self.err.write(f"tether: {level}: {visible(message, multiline=True)}\n")
                self.err.flush()
            case TurnSummary() as summary:
                self._say(describe_summary(summary))
            case _:
                pass

    def snapshot(self, snapshot: SessionSnapshot, *, last_turns: int | None = None) -> None:
        """Print a session's transcript so far (as if its events had been streamed)."""
        if self.json_mode:
            self.out.write(_json.encode(snapshot).decode() + "\n")
            return
        turns = snapshot.turns if last_turns is None else snapshot.turns[-last_turns:]
        for turn in turns:
            running = turn.status == "running"
            for index, item in enumerate(turn.items):
                last = index == len(turn.items) - 1
                if isinstance(item, ToolCall):
                    self._newline()
                    self.out.write(f"→ {describe_call(item)}\n")
                    if item.status not in ("completed", "running"):
                        self._completed(item)
                elif isinstance(item, UserMessage):
                    self._newline()
                    self.out.write(f"» {visible(item.text, multiline=True)}\n")
                elif isinstance(item, AgentMessage) and item.superseded:
                    continue
                elif isinstance(item, AgentMessage) and running and last:
                    # Still streaming: later deltas continue this line.
                    self._streamed[item.id] = [item.text]
                    if self.live:
                        self._newline()
                        self.out.write(visible(item.text, multiline=True))
                        self._mid_line = bool(item.text) and not item.text.endswith("\n")
                        self._erasable = item.id
                else:
                    self._completed(item)
        if not (turns and turns[-1].status == "running"):
            self._newline()
        self.out.flush()
