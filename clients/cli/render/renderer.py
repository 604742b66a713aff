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

import os
import sys
import time
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, TextIO

import msgspec

from tether.clients.cli.render.blocks import open_block_start
from tether.clients.cli.render.under_way import OUTPUT_KEPT, UnderWay, task_description
from tether.clients.core.text import (
    SUCCESS_TAIL_LINES,
    approval_parts,
    describe_image,
    describe_summary,
    diff_lines,
    failed,
    failure_tail,
    first_line,
    resolution,
    tool_line,
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

if TYPE_CHECKING:
    from tether.clients.cli.render.styled import Painter

_json = msgspec.json.Encoder()


def color_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether escape sequences may be written to a terminal: not when `NO_COLOR` is set
    (to anything but "") or TERM is `dumb`."""
    env = os.environ if environ is None else environ
    return not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def _terminal_size(out: TextIO) -> Callable[[], tuple[int, int]]:
    def size() -> tuple[int, int]:
        try:
            columns, lines = os.get_terminal_size(out.fileno())
        except (OSError, ValueError, AttributeError):
            return 80, 24
        return columns, lines

    return size


class _Message:
    """An agent message being streamed."""

    def __init__(self, item_id: str, text: str = "") -> None:
        self.id = item_id
        self.text = text
        self.done = 0
        """Styled: where the block still open starts (everything before it is printed)."""
        self.open_rows = 0
        """Styled: rows of the open block printed already (it outgrew the live region)."""
        self.rows = 0
        """Styled: rows printed for this message, for erasing it."""
        self.rendered: tuple[tuple[int, int, int], list[str]] | None = None
        """Styled: the open block's rows, and the (length, done, columns) they are for."""


class Renderer:
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
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.out.isatty() if live is None else live
        status_live = self.err.isatty() if status_live is None else status_live
        color = color_allowed() if color is None else color
        self.styled_out = bool(self.live and color and not json_mode)
        self.styled_err = bool(status_live and color and not json_mode)
        self._painter: Painter | None = None
        if self.styled_out or self.styled_err:
            from tether.clients.cli.render import styled  # rich: only for a terminal

            self._painter = styled.Painter()
        self.region = region
        self._region_stream: TextIO | None = (
            None
            if not region
            else self.err
            if self.styled_err
            else self.out
            if self.styled_out
            else None
        )
        self._region: list[str] = []
        """The live region as drawn: lines at the bottom of the screen, cursor below them."""
        self._hidden = False
        """An approval is being asked: draw no region."""
        self._hold = False
        """Redraw the region only at the next tick (someone else may write first)."""
        self._terminal_size = terminal_size or _terminal_size(self._region_stream or self.out)
        self._clock = clock
        self._now = clock()
        self._frame = -1
        """The tenth of a second last drawn by `tick`."""
        self._mid_line = False
        self._messages: dict[str, _Message] = {}
        """Agent messages being streamed."""
        self._under = UnderWay()
        self._erasable: str | None = None
        """The streamed message whose text is all that was printed since it started."""
        self._said: set[str] = set()
        """Error notices printed, so that a turn's error repeating one is not printed twice."""
        self._question: str | None = None
        """The approval question on `err`'s line, waiting for its one-key answer."""
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
        self._hold = False
        self._event(params.event)
        self._refresh()

    def tick(self, now: float | None = None) -> None:
        """Let time show: spinners turn, elapsed times and countdowns advance. Call it about
        ten times a second while waiting for events; cheap when nothing moves."""
        if self.json_mode or self._region_stream is None:
            return
        self._now = self._clock() if now is None else now
        frame = int(self._now * 10)
        if frame == self._frame and not self._hold:
            return  # nothing on screen can have moved
        self._frame = frame
        self._hold = False
        self._refresh()

    @property
    def wants_ticks(self) -> bool:
        """Whether something on screen moves with time, or waits for the next tick to be
        drawn (the caller should `tick`)."""
        moving = self._under.moving and not self._hidden and self._question is None
        return bool(self.region and self.styled_err and (self._hold or moving))

    def activity(self, now: float | None = None) -> str | None:
        """What is under way, as one line of plain text (relayed parts escaped, no escape
        sequences), for a host that draws it itself (`region=False`); None when nothing is,
        or while an approval is asked. In order of precedence: a retry's countdown, the call
        started last (spinner, elapsed time, its output's last line, how many others run),
        reasoning and for how long, a reply being written, "thinking… 3 s" until a model
        call's first token. `now` is on the renderer's clock (default: the clock's now)."""
        now = self._clock() if now is None else now
        if self._hidden or self.json_mode:
            return None
        return self._under.activity(now, replying=bool(self._messages))

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
        if text is not None:
            self._clear_region()
            self._newline()
            self.err.write(text)
            self.err.flush()
        self._question = text

    def end_question(self) -> None:
        """Leave the question where it is (Ctrl-C came): end its line, draw it no more."""
        if self._question is not None:
            self._question = None
            self.err.write("\n")
            self.err.flush()

    def note(self, text: str) -> None:
        """Print `text` (one or more lines, escaped already) on stderr as given, above the
        live region and any question."""
        self._emit(self.err, text.split("\n"))
        self._refresh()

    def say(self, line: str, level: str = "info") -> None:
        """Print one line of tether's own on stderr (prefixed `tether: `), above the live
        region; `line` is printed as given, escape it first if it relays anything."""
        self._say(line, level)
        self._refresh()

    # --- output primitives -----------------------------------------------------------------

    def _on_screen(self, stream: TextIO) -> bool:
        return bool(
            (stream is self.out and self.styled_out) or (stream is self.err and self.styled_err)
        )

    def _clear_region(self) -> None:
        if self._region and self._region_stream is not None:
            self._region_stream.write(f"\r\x1b[{len(self._region)}A\x1b[J")
            self._region_stream.flush()
        self._region = []

    def _emit(self, stream: TextIO, lines: list[str]) -> None:
        """Print whole lines for good, above the live region and the question."""
        if not lines:
            return
        if self._on_screen(stream):
            self._clear_region()
        elif stream is self.err:
            self._newline()
        question = self._question if stream is self.err or self.live else None
        if question is not None:
            self._take_question_off(question)
        self._erasable = None
        stream.write("".join(f"{line}\n" for line in lines))
        stream.flush()
        if question is not None:
            self.err.write(question)
            self.err.flush()

    def _take_question_off(self, question: str) -> None:
        """Before a line is printed: erase the question when it fits on its line, else end
        that line (the question is drawn again below what is printed)."""
        columns, _ = self._size()
        if self.styled_err and len(question) < columns:
            self.err.write("\r\x1b[K")
        else:
            self.err.write("\n")
        self.err.flush()

    def _newline(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False

    def _refresh(self) -> None:
        self.out.flush()
        if self._region_stream is None or self._hold:
            self.err.flush()
            return
        hidden = self._hidden or self._question is not None
        lines = [] if hidden else self._region_lines()
        if lines != self._region:
            self._clear_region()
            self._region_stream.write("".join(f"{line}\n" for line in lines))
            self._region = lines
        self._region_stream.flush()
        self.err.flush()

    def _say(self, line: str, level: str = "info") -> None:
        text = f"tether: {line}"
        painter = self._err_painter()
        self._emit(self.err, [painter.notice(text, level) if painter is not None else text])

    def _err_painter(self) -> "Painter | None":
        return self._painter if self.styled_err else None

    # --- the live region ---------------------------------------------------------------

    def _size(self) -> tuple[int, int]:
        columns, lines = self._terminal_size()
        return max(columns, 20), max(lines, 4)

    def _region_lines(self) -> list[str]:
        painter = self._painter
        if painter is None:
            return []
        columns, rows = self._size()
        status = self._under.status_lines(painter, columns, self._now) if self.styled_err else []
        markdown: list[str] = []
        if self.styled_out:
            for message in self._messages.values():
                markdown += self._block_rows(message, painter, columns)[message.open_rows :]
        return (markdown + status)[-(rows - 1) :]

    def _block_rows(self, message: _Message, painter: "Painter", columns: int) -> list[str]:
        """The rows of a styled message's open block (all of them, those printed already
        included), with the blank line that separates it from the block before."""
        key = (len(message.text), message.done, columns)
        if message.rendered is None or message.rendered[0] != key:
            text = visible(message.text[message.done :], multiline=True)
            rows = painter.markdown(text, columns)
            if rows and message.rows and message.done:
                rows.insert(0, "")
            message.rendered = (key, rows)
        return message.rendered[1]

    # --- events ----------------------------------------------------------------------------

    def _event(self, event: AnyEvent) -> None:
        match event:
            case TurnStarted(turn_id=turn_id, environment=environment):
                self._under.waiting_since = self._now
                if self.verbose and environment is not None:
                    from tether.clients.cli.environment import environment_words

                    self._say(
                        f"turn {turn_id} runs its commands in {environment_words(environment)}"
                    )
            case ItemDelta(item_id=item_id, progress=ToolProgress() as report):
                self._under.report_progress(item_id, report)
            case ItemDelta(item_id=item_id, delta=delta):
                self._delta(item_id, delta)
            case ItemStarted(item=item) if item.parent_item_id and not isinstance(item, ToolCall):
                pass  # a subagent's text: shown whole when it completes
            case ItemUpdated(item=ToolCall() as call) if call.id in self._under.calls:
                self._under.calls[call.id].item = call
            case ItemStarted(item=AgentMessage(id=item_id)):
                self._under.waiting_since = None
                self._under.retry = None
                self._messages[item_id] = _Message(item_id)
                if self.live:
                    self._newline()
                    self._erasable = item_id
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
                self._hidden = bool(self._under.approvals)
                self._hold = True  # the prompt may still print its line
                here = approval_id in self.answered_here
                rule = self._rules.pop(approval_id, "") if scope == "always" else ""
                self._say(resolution(decision, by, message, here=here, rule=rule))
            case InputQueued(text=text, by=by):
                who = f" from {by}" if by else ""
                self._say(visible(f"(queued{who}, joins at the next step) {text}"))
            case InputDropped(input_ids=ids, reason=reason):
                self._say(visible(f"({len(ids)} queued message(s) dropped: {reason})"))
            case ModelRetry(attempt=attempt, max_attempts=most, delay_seconds=delay, reason=why):
                self._under.waiting_since = self._now + delay
                self._under.retry = (self._now + delay, visible(f"({attempt}/{most}): {why}"))
                if not (self.region and self._err_painter() is not None):
                    self._say(visible(f"retrying in {delay:.0f} s ({attempt}/{most}): {why}"))
            case _:
                pass

    def _delta(self, item_id: str, delta: str) -> None:
        message = self._messages.get(item_id)
        if message is not None:
            message.text += delta
            if self.styled_out:
                self._advance(message)
            elif self.live and not self.region:
                self._plain_lines(message)
            elif self.live:
                self.out.write(visible(delta, multiline=True))
                self._mid_line = not delta.endswith("\n")
            return
        self._under.add_output(item_id, delta)

    def _advance(self, message: _Message) -> None:
        """Print what of a styled message later text can no longer change: its finished
        blocks, and the top of an open block that outgrew the live region (a long code
        block scrolls, as it would on a terminal)."""
        cut = open_block_start(message.text, message.done)
        if cut > message.done:
            self._print_rows(message, cut)
        if not self.region:
            return  # the open block is printed when it closes
        assert self._painter is not None
        columns, rows = self._size()
        status = (
            self._under.status_lines(self._painter, columns, self._now) if self.styled_err else []
        )
        room = max(3, rows - 2 - len(status))
        pending = self._block_rows(message, self._painter, columns)[message.open_rows :]
        if len(pending) > room:
            self._print(message, pending[: len(pending) - room])
            message.open_rows += len(pending) - room

    def _print_rows(self, message: _Message, upto: int) -> None:
        """Print a styled message's text up to `upto` (the end of a block) for good."""
        assert self._painter is not None
        columns, _ = self._size()
        text = message.text
        message.text = text[:upto]
        rows = self._block_rows(message, self._painter, columns)[message.open_rows :]
        message.text = text
        self._print(message, rows)
        message.done, message.open_rows, message.rendered = upto, 0, None

    def _print(self, message: _Message, rows: list[str]) -> None:
        erasable = self._erasable == message.id or message.rows == 0
        self._emit(self.out, rows)
        message.rows += len(rows)
        if erasable:
            self._erasable = message.id

    def _plain_lines(self, message: _Message, *, final: bool = False) -> None:
        """Without a region, plain: write a streamed message's complete lines not written
        yet (`final`: all the rest, ended with a newline); `done` counts what was written."""
        end = len(message.text) if final else message.text.rfind("\n") + 1
        if end <= message.done:
            return
        text = message.text[message.done : end]
        self.out.write(visible(text, multiline=True) + ("" if text.endswith("\n") else "\n"))
        message.done = end

    def _agent_message(self, item: AgentMessage) -> None:
        message = self._messages.pop(item.id, None)
        if self.styled_out:
            self._styled_message(item, message)
            return
        shown = self.live and message is not None
        if item.superseded:
            written = self.region or (message is not None and message.done > 0)
            if shown and written:  # plain text cannot be taken back
                self._newline()
                self._say("(the reply above broke off; the retried reply replaces it)")
            return
        if not shown:
            self._newline()
            self.out.write(visible(item.text, multiline=True))
            self._mid_line = not item.text.endswith("\n")
        elif not self.region:
            assert message is not None
            message.text = item.text
            self._plain_lines(message, final=True)
        self._erasable = None
        self._newline()

    def _styled_message(self, item: AgentMessage, message: _Message | None) -> None:
        if message is None:
            message = _Message(item.id)
            self._erasable = item.id
        if item.superseded:
            if message.rows and not self._erase_rows(message):
                self._say("(the reply above broke off; the retried reply replaces it)")
            return
        message.text = item.text
        self._print_rows(message, len(item.text))
        self._erasable = None

    def _erase_rows(self, message: _Message) -> bool:
        """Take a styled message's printed rows off the screen; False when they cannot all be
        reached (something was printed after them, or they scrolled away)."""
        _, lines = self._size()
        if not self.region:
            return False  # nothing printed is taken back
        if self._erasable != message.id or message.rows + len(self._region) > lines - 1:
            return False
        self._clear_region()
        self.out.write(f"\r\x1b[{message.rows}A\x1b[J")
        self._erasable = None
        return True

    def _approval(self, approval: ApprovalRequest) -> None:
        self._under.approvals.add(approval.id)
        self._rules[approval.id] = approval.always_rule
        if approval.preview:
            self._previewed[approval.item_id] = approval.preview
        self._hidden = True
        self._clear_region()
        if self._question is not None:
            return  # asked after the one on the terminal, and described then
        head, preview, after = approval_parts(approval)
        painter = self._err_painter()
        if preview and painter is not None:
            lines = [*head, *painter.diff(preview.replace("\r\n", "\n").split("\n")), *after]
        else:
            lines = [*head, *([preview] if preview else []), *after]
        self._emit(self.err, lines)

    def _nested_completed(self, item: AnyItem) -> None:
        """One line for a subagent's finished item, under its task call: a tool call's line,
        the first line of its text, a notice. Its reasoning is not shown."""
        prefix = self._under.nesting(item)
        match item:
            case ToolCall():
                running = self._under.calls.pop(item.id, None)
                started = running.started if running is not None else None
                self._tool_done(item, started, running.output if running is not None else "")
            case AgentMessage(text=text, superseded=False) if text.strip():
                line = f"{prefix}{first_line(text)}"
                painter = self._err_painter()
                self._emit(self.err, [painter.line(line, "dim") if painter is not None else line])
            case Notice(level=level, message=message):
                self._say(f"{prefix.strip()} {level}: {visible(message)}", level)
            case _:
                pass

    def _tool_done(self, item: ToolCall, started: float | None, streamed: str) -> None:
        mark, call, rest = tool_line(item, None if started is None else self._now - started)
        prefix = self._under.nesting(item)
        mark = f"{prefix}{mark}"
        shown_before = self._previewed.pop(item.id, None)
        same = shown_before is not None and shown_before.strip() == item.diff.strip()
        diff = [] if same else diff_lines(item.diff)
        if failed(item):
            shown = failure_tail(item, streamed)
        else:
            most = OUTPUT_KEPT if self.verbose else SUCCESS_TAIL_LINES
            shown = failure_tail(item, streamed, most)
        tail = [f"  │ {line}" for line in shown]
        tail += [f"{prefix}  {describe_image(image)}" for image in item.images]
        painter = self._err_painter()
        if painter is not None:
            bad = failed(item)
            spans = [(f"{mark} ", "bold red" if bad else "green"), (call, "")]
            spans.append((rest, "red" if bad else "dim"))
            lines = [
                painter.spans(spans),
                *painter.diff(diff),
                *(painter.line(row, "dim") for row in tail),
            ]
        else:
            lines = [f"{mark} {call}{rest}", *diff, *tail]
        self._emit(self.err, lines)

    def _completed(self, item: AnyItem) -> None:
        if item.parent_item_id:
            self._nested_completed(item)
            return
        match item:
            case AgentMessage() as message:
                self._agent_message(message)
            case Reasoning(id=item_id, superseded=superseded):
                started, _ = self._under.reasoning.pop(item_id, (self._now, ""))
                painter = self._err_painter()
                if painter is not None and not superseded:
                    took = f"✻ reasoned for {self._now - started:.0f} s"
                    self._emit(self.err, [painter.line(took, "dim")])
            case ToolCall() as call:
                running = self._under.calls.pop(call.id, None)
                started = running.started if running is not None else None
                self._tool_done(call, started, running.output if running is not None else "")
                if running is not None and not self._under.calls:
                    self._under.waiting_since = self._now  # the next model call
            case Notice(level=level, message=message):
                if level == "error":
                    self._said.add(message)
                self._say(f"{level}: {visible(message, multiline=True)}", level)
            case TurnSummary() as summary:
                self._say(describe_summary(summary))
            case UserMessage(images=images):
                for image in images:
                    self._say(describe_image(image))
            case _:
                pass

    def _turn_completed(self, status: str, error: str | None) -> None:
        for message in list(self._messages.values()):  # replies the turn ended without
            if self.styled_out:
                self._print_rows(message, len(message.text))
            elif self.live and not self.region:
                self._plain_lines(message, final=True)
            elif not self.live and message.text:
                self._newline()
                self.out.write(visible(message.text, multiline=True))
                self._mid_line = not message.text.endswith("\n")
        self._messages.clear()
        self._under.clear()
        self._hidden = False
        self._newline()
        if error is not None and error not in self._said:
            self._say(f"error: {error}" if status == "failed" else error, "error")

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
                    self._resume_message(item)
                else:
                    self._completed(item)
            if running and not self._under.calls and not self._messages:
                self._under.waiting_since = self._now
        if not (turns and turns[-1].status == "running"):
            self._newline()
        self._refresh()

    def _user_message(self, item: UserMessage) -> None:
        self._newline()
        text = f"» {visible(item.text, multiline=True)}"
        if self.styled_out:
            assert self._painter is not None
            self._emit(self.out, [self._painter.line(line, "bold") for line in text.split("\n")])
        else:
            self.out.write(text + "\n")
        for image in item.images:
            self._say(describe_image(image))

    def _resume_message(self, item: AgentMessage) -> None:
        """A reply still streaming when the snapshot was taken: later deltas continue it."""
        message = self._messages[item.id] = _Message(item.id, item.text)
        if self.styled_out:
            self._erasable = item.id
            self._advance(message)
        elif self.live and not self.region:
            self._plain_lines(message)
        elif self.live:
            self._newline()
            self.out.write(visible(item.text, multiline=True))
            self._mid_line = bool(item.text) and not item.text.endswith("\n")
            self._erasable = item.id
