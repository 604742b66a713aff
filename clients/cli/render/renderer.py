"""Printing a session's events for a person (or, with --json, for a program).

Where things go: the answer (assistant text) to `out`; tool lines, diffs, notices and the
reason a turn did not complete to `err`, so that `tether run … > answer.md` keeps only the
answer. With --json every event is one JSON line on `out`, exactly as received.

How, for each stream:
- A terminal that takes colour (`live` for `out`, `status_live` for `err`, unless `NO_COLOR`
  is set or TERM is `dumb`): rich draws it (`styled`, imported only then). The answer is
  Markdown rendered as it streams: finished blocks are printed once, the block still open is
  redrawn in the live region at the bottom of the screen (`blocks`). The live region also
  holds, on `err`'s terminal, one line per running tool call with a spinner and its elapsed
  time and the last lines of a command's output, reasoning as it streams (dimmed), a
  "thinking… 3 s" line until a model call's first token, and a retry's countdown. A finished
  call becomes one line, `✓`, or `✗` with a command's exit code, then an edit's coloured
  diff (unless its approval showed that same diff), and a command's last lines of output
  (five when it failed, three when it succeeded; all of them with `verbose`).
  Finished reasoning becomes one dim line.
- Anything else: plain text, no escape sequences at all. A finished call is one line (its
  diff and a command's tail below it); `out` streams text as it arrives when `live`
  (a terminal with NO_COLOR), else each reply is written whole when it completes.

A host that owns the bottom of the screen itself (the interactive mode's prompt) builds the
renderer with `region=False`: then nothing is ever redrawn, erased or moved over. Output is
whole lines, each written once: Markdown styled block by block as each block completes (an
open block waits for its end), a tool call once it completes, reasoning as its one dim line,
a retry as one line; plain text a whole line at a time. What moves is the host's to draw, from
`activity`: one line saying what is under way (the running call with its spinner, elapsed
time and last output line, "thinking… 3 s", a retry's countdown).

The live region is redrawn by `event` and by `tick`, which the caller calls about ten times a
second while it waits (the renderer never starts a thread and never reads the terminal).
While an approval is pending the region is hidden, so the question stays the last thing on
the screen; after it is answered the region comes back at the next `tick`, below whatever
the prompt printed. The question itself is the renderer's to show (`question`): a line printed
while it is on the terminal (another call completing, a notice) is printed above it, and the
question drawn again below, so that nothing ever overdraws it.

A reply whose model call broke off and is retried completes as `superseded`. On a terminal its
text is erased (when it is still on screen and nothing was printed after it; else a line on
stderr says the retry replaces it). Plain output cannot take text back: a reply streamed with
NO_COLOR gets that line, and into a pipe or a file each reply is written whole when it
completes, and a superseded one not at all.

Everything the daemon relays passes through `visible` before it reaches the terminal (see
`text`), in styled output as in plain.
"""

import time
from collections.abc import Callable, Container
from typing import TextIO

import msgspec

from tether.clients.cli.render.replies import Replies
from tether.clients.cli.render.screen import Screen, color_allowed
from tether.clients.cli.render.tool_lines import approval_lines, completed_call_lines
from tether.clients.cli.render.under_way import UnderWay, task_description
from tether.clients.core.text import (
    describe_image,
    describe_summary,
    first_line,
    resolution,
    visible,
)
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
    ItemUpdated,
    ModelRetry,
    ToolProgress,
    TurnCompleted,
    TurnStarted,
)
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Notice,
    Reasoning,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.methods import SessionEventParams
from tether.protocol.session import SessionSnapshot

__all__ = ["Renderer", "color_allowed"]

_json = msgspec.json.Encoder()


class Renderer:
    """Takes a session's events and snapshots and shows them: on `Screen`, with replies
    streamed by `Replies`, tool calls and approvals drawn by `tool_lines`, and what is under
    way kept by `UnderWay` for the live region or the host's `activity` line."""

    def __init__(
        self,
        *,
        json_mode: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
        live: bool | None = None,
        terminal_size: Callable[[], tuple[int, int]] | None = None,
        status_live: bool | None = None,
        color: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        region: bool = True,
        verbose: bool = False,
    ) -> None:
        """`live`: `out` is a terminal (default: when it is a tty): stream text as it
        arrives, else write each reply when it completes. `status_live`: the same for `err`
        (spinners, the live region). `color`: escape sequences allowed (default: unless
        `NO_COLOR` or TERM=dumb); without it both streams get plain text. `terminal_size`
        gives (columns, lines) of the terminal; `clock` the time events arrive at (the
        timebase of `tick` and `activity`). `region`: keep a live region at the bottom of the
        terminal; False for a host that draws the bottom itself (see the module's rules):
        whole lines only, no cursor movement, and `activity` for what moves. `verbose`: say
        at a turn's start which environment its commands run in, and keep all the output of a
        command that succeeded on screen, not its last lines."""
        self.json_mode = json_mode
        self.verbose = verbose
        self._screen = screen = Screen(
            json_mode=json_mode,
            out=out,
            err=err,
            live=live,
            terminal_size=terminal_size,
            status_live=status_live,
            color=color,
            region=region,
        )
        self.out = screen.out
        self.err = screen.err
        self.live = screen.live
        self.styled_out = screen.styled_out
        self.styled_err = screen.styled_err
        self.region = region
        self._clock = clock
        self._now = clock()
        self._frame = -1
        """The tenth of a second last drawn by `tick`."""
        self._under = UnderWay()
        self._replies = Replies(screen, self._under)
        self._said: set[str] = set()
        """Error notices printed, so that a turn's error repeating one is not printed twice."""
        self._rules: dict[str, str] = {}
        """The rule "always" would add, by approval id, for the approvals asked."""
        self._previewed: dict[str, str] = {}
        """The diffs shown with approvals, by tool call id: not printed again when the call
        completes with that same diff."""
        self.answered_here: Container[str] = ()
        """The approvals this client answered (its answerer's record): said as answered here,
        not by the client's name."""

    # --- the caller's side ----------------------------------------------------------------

    def event(self, params: SessionEventParams) -> None:
        if self.json_mode:
            self.out.write(_json.encode(params).decode() + "\n")
            self.out.flush()
            return
        self._now = self._clock()
        self._screen.hold = False
        self._event(params.event)
        self._refresh()

    def tick(self, now: float | None = None) -> None:
        """Let time show: spinners turn, elapsed times and countdowns advance. Call it about
        ten times a second while waiting for events; cheap when nothing moves."""
        if self.json_mode or self._screen.region_stream is None:
            return
        self._now = self._clock() if now is None else now
        frame = int(self._now * 10)
        if frame == self._frame and not self._screen.hold:
            return  # nothing on screen can have moved
        self._frame = frame
        self._screen.hold = False
        self._refresh()

    @property
    def wants_ticks(self) -> bool:
        """Whether something on screen moves with time, or waits for the next tick to be
        drawn (the caller should `tick`)."""
        screen = self._screen
        moving = self._under.moving and not screen.hidden and screen.question is None
        return bool(self.region and self.styled_err and (screen.hold or moving))

    def activity(self, now: float | None = None) -> str | None:
        """What is under way, as one line of plain text (relayed parts escaped, no escape
        sequences), for a host that draws it itself (`region=False`); None when nothing is,
        or while an approval is asked. In order of precedence: a retry's countdown, the call
        started last (spinner, elapsed time, its output's last line, how many others run),
        reasoning and for how long, a reply being written, "thinking… 3 s" until a model
        call's first token. `now` is on the renderer's clock (default: the clock's now)."""
        now = self._clock() if now is None else now
        if self._screen.hidden or self.json_mode:
            return None
        return self._under.activity(now, replying=bool(self._replies.streaming))

    def pending_approval(self, approval: ApprovalRequest) -> None:
        """`approval` was pending when the client attached: describe it (once) and hide the
        live region, as when it is requested while followed."""
        if self.json_mode or approval.id in self._under.approvals:
            return
        self._approval(approval)
        self._refresh()

    def question(self, text: str | None) -> None:
        """Put the approval question `text` on `err` (no newline: the answer ends the line), or
        with None, say it is off the line (answered: the line was ended). While it is on, the
        live region stays hidden and lines printed go above it."""
        if self.json_mode:
            return
        self._screen.ask(text)

    def end_question(self) -> None:
        """Leave the question where it is (Ctrl-C came): end its line, draw it no more."""
        self._screen.end_question()

    def note(self, text: str) -> None:
        """Print `text` (one or more lines, escaped already) on stderr as given, above the
        live region and any question."""
        self._screen.emit(self.err, text.split("\n"))
        self._refresh()

    def say(self, line: str, level: str = "info") -> None:
        """Print one line of tether's own on stderr (prefixed `tether: `), above the live
        region; `line` is printed as given, escape it first if it relays anything."""
        self._screen.say(line, level)
        self._refresh()

    # --- the live region ---------------------------------------------------------------

    def _refresh(self) -> None:
        self._screen.refresh(self._region_lines)

    def _region_lines(self) -> list[str]:
        screen = self._screen
        painter = screen.painter
        if painter is None:
            return []
        columns, rows = screen.size()
        status = self._under.status_lines(painter, columns, self._now) if self.styled_err else []
        markdown = self._replies.region_rows(painter, columns)
        return (markdown + status)[-(rows - 1) :]

    # --- events ----------------------------------------------------------------------------

    def _event(self, event: AnyEvent) -> None:
        screen = self._screen
        match event:
            case TurnStarted(turn_id=turn_id, environment=environment):
                self._under.waiting_since = self._now
                if self.verbose and environment is not None:
                    from tether.clients.cli.environment import environment_words

                    screen.say(
                        f"turn {turn_id} runs its commands in {environment_words(environment)}"
                    )
            case ItemDelta(item_id=item_id, progress=ToolProgress() as report):
                self._under.report_progress(item_id, report)
            case ItemDelta(item_id=item_id, delta=delta):
                if not self._replies.delta(item_id, delta, self._now):
                    self._under.add_output(item_id, delta)
            case ItemStarted(item=item) if item.parent_item_id and not isinstance(item, ToolCall):
                pass  # a subagent's text: shown whole when it completes
            case ItemUpdated(item=ToolCall() as call) if call.id in self._under.calls:
                self._under.calls[call.id].item = call
            case ItemStarted(item=AgentMessage(id=item_id)):
                self._under.waiting_since = None
                self._under.retry = None
                self._replies.start(item_id)
            case ItemStarted(item=Reasoning(id=item_id)):
                self._under.waiting_since = None
                self._under.retry = None
                self._under.reasoning[item_id] = (self._now, "")
            case ItemStarted(item=ToolCall() as call):
                self._under.waiting_since = None
                self._under.start_call(call, self._now)
            case ItemCompleted(item=item):
                self._completed(item)
            case TurnCompleted(status=status, error=error):
                self._turn_completed(status, error.message if error is not None else None)
            case ApprovalRequested(approval=approval):
                self._approval(approval)
            case ApprovalResolved(
                approval_id=approval_id, decision=decision, scope=scope, by=by, message=message
            ):
                self._under.approvals.discard(approval_id)
                screen.hidden = bool(self._under.approvals)
                screen.hold = True  # the prompt may still print its line
                here = approval_id in self.answered_here
                rule = self._rules.pop(approval_id, "") if scope == "always" else ""
                screen.say(resolution(decision, by, message, here=here, rule=rule))
            case InputQueued(text=text, by=by):
                who = f" from {by}" if by else ""
                screen.say(visible(f"(queued{who}, joins at the next step) {text}"))
            case InputDropped(input_ids=ids, reason=reason):
                screen.say(visible(f"({len(ids)} queued message(s) dropped: {reason})"))
            case ModelRetry(attempt=attempt, max_attempts=most, delay_seconds=delay, reason=why):
                self._under.waiting_since = self._now + delay
                self._under.retry = (self._now + delay, visible(f"({attempt}/{most}): {why}"))
                if not (self.region and screen.err_painter() is not None):
                    screen.say(visible(f"retrying in {delay:.0f} s ({attempt}/{most}): {why}"))
            case _:
                pass

    def _approval(self, approval: ApprovalRequest) -> None:
        screen = self._screen
        self._under.approvals.add(approval.id)
        self._rules[approval.id] = approval.always_rule
        if approval.preview:
            self._previewed[approval.item_id] = approval.preview
        screen.hidden = True
        screen.clear_region()
        if screen.question is not None:
            return  # asked after the one on the terminal, and described then
        screen.emit(self.err, approval_lines(approval, screen.err_painter()))

    def _nested_completed(self, item: AnyItem) -> None:
        """One line for a subagent's finished item, under its task call: a tool call's line,
        the first line of its text, a notice. Its reasoning is not shown."""
        prefix = self._under.nesting(item)
        match item:
            case ToolCall():
                self._tool_done(item)
            case AgentMessage(text=text, superseded=False) if text.strip():
                line = f"{prefix}{first_line(text)}"
                painter = self._screen.err_painter()
                self._screen.emit(
                    self.err, [painter.line(line, "dim") if painter is not None else line]
                )
            case Notice(level=level, message=message):
                self._screen.say(f"{prefix.strip()} {level}: {visible(message)}", level)
            case _:
                pass

    def _tool_done(self, item: ToolCall) -> bool:
        """Print a finished call's lines; whether it was seen running."""
        running = self._under.calls.pop(item.id, None)
        started = running.started if running is not None else None
        lines = completed_call_lines(
            item,
            elapsed=None if started is None else self._now - started,
            prefix=self._under.nesting(item),
            streamed=running.output if running is not None else "",
            previewed=self._previewed.pop(item.id, None),
            verbose=self.verbose,
            painter=self._screen.err_painter(),
        )
        self._screen.emit(self.err, lines)
        return running is not None

    def _completed(self, item: AnyItem) -> None:
        if item.parent_item_id:
            self._nested_completed(item)
            return
        screen = self._screen
        match item:
            case AgentMessage() as message:
                self._replies.completed(message)
            case Reasoning(id=item_id, superseded=superseded):
                started, _ = self._under.reasoning.pop(item_id, (self._now, ""))
                painter = screen.err_painter()
                if painter is not None and not superseded:
                    took = f"✻ reasoned for {self._now - started:.0f} s"
                    screen.emit(self.err, [painter.line(took, "dim")])
            case ToolCall() as call:
                if self._tool_done(call) and not self._under.calls:
                    self._under.waiting_since = self._now  # the next model call
            case Notice(level=level, message=message):
                if level == "error":
                    self._said.add(message)
                screen.say(f"{level}: {visible(message, multiline=True)}", level)
            case TurnSummary() as summary:
                screen.say(describe_summary(summary))
            case UserMessage(images=images):
                for image in images:
                    screen.say(describe_image(image))
            case _:
                pass

    def _turn_completed(self, status: str, error: str | None) -> None:
        self._replies.finish()  # replies the turn ended without
        self._under.clear()
        self._screen.hidden = False
        self._screen.newline()
        if error is not None and error not in self._said:
            self._screen.say(f"error: {error}" if status == "failed" else error, "error")

    # --- transcripts -----------------------------------------------------------------------

    def snapshot(self, snapshot: SessionSnapshot, *, last_turns: int | None = None) -> None:
        """Print a session's transcript so far (as if its events had been streamed); the
        running turn's calls and streaming reply carry on live."""
        if self.json_mode:
            self.out.write(_json.encode(snapshot).decode() + "\n")
            return
        self._now = self._clock()
        turns = snapshot.turns if last_turns is None else snapshot.turns[-last_turns:]
        for turn in turns:
            running = turn.status == "running"
            for index, item in enumerate(turn.items):
                last = index == len(turn.items) - 1
                if isinstance(item, ToolCall) and item.status == "running":
                    self._under.start_call(item, self._now)
                elif isinstance(item, ToolCall) and item.tool == "task":
                    self._under.subagents[item.id] = task_description(item)
                    self._completed(item)
                elif (
                    isinstance(item, AgentMessage | Reasoning)
                    and item.parent_item_id in self._under.calls
                ):
                    continue  # its subagent still runs: its text shows when it completes
                elif isinstance(item, UserMessage):
                    self._user_message(item)
                elif isinstance(item, AgentMessage) and item.superseded:
                    continue
                elif isinstance(item, AgentMessage) and running and last:
                    self._replies.resume(item, self._now)
                else:
                    self._completed(item)
            if running and not self._under.calls and not self._replies.streaming:
                self._under.waiting_since = self._now
        if not (turns and turns[-1].status == "running"):
            self._screen.newline()
        self._refresh()

    def _user_message(self, item: UserMessage) -> None:
        screen = self._screen
        screen.newline()
        text = f"» {visible(item.text, multiline=True)}"
        if self.styled_out:
            assert screen.painter is not None
            screen.emit(self.out, [screen.painter.line(line, "bold") for line in text.split("\n")])
        else:
            self.out.write(text + "\n")
        for image in item.images:
            screen.say(describe_image(image))
