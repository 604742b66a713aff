"""Printing a session's events for a person (or, with --json, for a program).

Assistant text streams inline to stdout; each tool call is one line when it starts, marked
with how it ended; notices (errors, pauses) go to stderr so a pipeline keeps only the answer.

Everything the daemon relays (model text, commands, paths, diffs, messages) passes through
`visible` before it reaches the terminal: a control character could otherwise move the
cursor, erase a line or hide the rest of an approval prompt, and a bidi control could reorder
what a person reads.
"""

import sys
import unicodedata
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


class Renderer:
    def __init__(
        self, *, json_mode: bool = False, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._mid_line = False
        self._streamed: set[str] = set()

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
                if item_id in self._streamed:
                    self.out.write(visible(delta, multiline=True))
                    self._mid_line = not delta.endswith("\n")
            case ItemStarted(item=AgentMessage(id=item_id)):
                self._newline()
                self._streamed.add(item_id)
            case ItemStarted(item=ToolCall() as call):
                self._newline()
                self.out.write(f"→ {describe_call(call)}\n")
            case ItemCompleted(item=item):
                self._completed(item)
            case TurnCompleted():
                self._newline()
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
        self.err.write(f"tether: {line}\n")
        self.err.flush()

    def _approval(self, approval: ApprovalRequest) -> None:
        self.err.write(describe_approval(approval))
        self.err.flush()

    def _completed(self, item: AnyItem) -> None:
        match item:
            case AgentMessage(id=item_id, text=text):
                if item_id not in self._streamed:
                    self._newline()
                    self.out.write(visible(text, multiline=True))
                    self._mid_line = not text.endswith("\n")
                self._streamed.discard(item_id)
                self._newline()
            case ToolCall(status=status, output=output) if status != "completed":
                self._newline()
                first = output.strip().splitlines()[0] if output.strip() else ""
                self.out.write(f"  ✗ {status}: {visible(first[:200])}\n")
            case Notice(level=level, message=message):
                self._newline()
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
                elif isinstance(item, AgentMessage) and running and last:
                    # Still streaming: later deltas continue this line.
                    self._newline()
                    self.out.write(visible(item.text, multiline=True))
                    self._mid_line = bool(item.text) and not item.text.endswith("\n")
                    self._streamed.add(item.id)
                else:
                    self._completed(item)
        if not (turns and turns[-1].status == "running"):
            self._newline()
        self.out.flush()
