"""The renderer for a host that owns the bottom of the screen (`region=False`): whole lines
only, each written once, never a cursor movement or a carriage return; Markdown block by block
as blocks complete, a call once it completes, and what moves as `activity`, over a fake clock."""

import io
import re

import msgspec

from tests.unit.test_cli_render_terminal import ANSWER, DIFF, END, PYTEST, START, call, done
from tether.clients.cli.render import Renderer
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
)
from tether.protocol.items import AgentMessage, Reasoning
from tether.protocol.methods import SessionEventParams

SGR = re.compile(r"\x1b\[[0-9;]*m")
SPINNING = "[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]"


class Writes(io.StringIO):
    """A terminal-like stream that keeps each write apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)

    def isatty(self) -> bool:
        return True


class Host:
    """A renderer without a region, writing into one stream, on a clock the test moves."""

    def __init__(self, *, styled: bool = True) -> None:
        self.now = 100.0
        self.stream = Writes()
        self.renderer = Renderer(
            out=self.stream,
            err=self.stream,
            live=True,
            status_live=True,
            color=styled,
            clock=lambda: self.now,
            terminal_size=lambda: (80, 24),
            region=False,
        )
        self.seq = 0

    def feed(self, *events: AnyEvent) -> None:
        for event in events:
            self.seq += 1
            self.renderer.event(
                SessionEventParams(session_id="s", epoch="e", seq=self.seq, event=event)
            )

    def later(self, seconds: float) -> str | None:
        """Let time pass (ticking, as a host does); the activity then."""
        self.now += seconds
        self.renderer.tick(self.now)
        return self.renderer.activity(self.now)

    def lines(self) -> list[str]:
        """What was written, colours removed, one entry a line."""
        return SGR.sub("", self.stream.getvalue()).split("\n")[:-1]

    def assert_whole_lines_only(self) -> None:
        written = self.stream.getvalue()
        assert "\r" not in written
        assert SGR.sub("", written).count("\x1b") == 0, "no escape but colours"
        assert all(w.endswith("\n") for w in self.stream.writes if w), self.stream.writes


def shown(host: Host) -> list[str]:
    return [line.strip() for line in host.lines()]


def test_markdown_is_printed_styled_block_by_block_as_blocks_complete() -> None:
    host = Host()
    host.feed(START, ItemStarted(turn_id="t", item=AgentMessage(id="m")))
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="# Result\n\nThe tests *pa"))
    assert shown(host) == []  # the paragraph's first line is not complete yet
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="ss* now.\n"))
    assert shown(host) == ["Result"]  # the heading is complete; the paragraph may go on
    host.later(1.0)
    assert shown(host) == ["Result"]  # ticks redraw nothing
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="\n```python\ndef f():\n"))
    assert shown(host) == ["Result", "", "The tests pass now."]  # the code block is open
    rest = ANSWER[len("# Result\n\nThe tests *pass* now.\n\n```python\ndef f():\n") :]
    host.feed(ItemDelta(turn_id="t", item_id="m", delta=rest))
    host.feed(ItemCompleted(turn_id="t", item=AgentMessage(id="m", text=ANSWER)), END)
    assert [line for line in shown(host) if line] == [
        "Result",
        "The tests pass now.",
        "def f():",
        "return 1",
    ]
    raw = host.stream.getvalue()
    assert "\x1b[1;4mResult\x1b[0m" in raw  # styled: the heading bold and underlined
    assert "\x1b[3mpass\x1b[0m" in raw
    host.assert_whole_lines_only()


def test_a_running_call_is_activity_and_printed_once_when_it_completes() -> None:
    host = Host()
    running = call()
    host.feed(START, ItemStarted(turn_id="t", item=running))
    host.feed(ItemDelta(turn_id="t", item_id="c", delta="collected 3 items\nFAILED test_a\n"))
    activity = host.later(2.3)
    assert activity is not None
    assert re.fullmatch(
        SPINNING + r" run_command\(command='pytest'\) · 2\.3 s · FAILED test_a", activity
    )
    frames = {(host.later(0.1) or "")[:1] for _ in range(10)}
    assert len(frames) > 1, "the spinner turns"
    assert host.stream.getvalue() == ""  # nothing printed while it runs
    host.feed(done(running, exit_code=1, duration_seconds=3.3, output="exit code 1 · 3.3 s\nx"))
    assert host.lines() == [
        "✗ run_command(command='pytest') exit 1 · 3.3 s",
        "  │ collected 3 items",
        "  │ FAILED test_a",
    ]
    assert "\x1b[1;31m✗ \x1b[0m" in host.stream.getvalue()
    assert re.fullmatch(SPINNING + r" thinking… 1 s", host.later(1.0) or "")
    host.assert_whole_lines_only()


def test_an_edit_prints_its_coloured_diff_and_two_running_calls_are_counted() -> None:
    host = Host()
    edit = call("e", "edit_file", '{"path": "a.py"}')
    host.feed(START, ItemStarted(turn_id="t", item=call()), ItemStarted(turn_id="t", item=edit))
    assert (host.later(0.5) or "").endswith("edit_file(path='a.py') · 0.5 s · 1 more running")
    host.feed(done(edit, diff=DIFF))
    mark, *diff = host.lines()
    assert mark.startswith("✓ edit_file(path='a.py')")
    assert diff == DIFF.rstrip("\n").split("\n")
    raw = host.stream.getvalue()
    assert "\x1b[32m+new line\x1b[0m" in raw
    assert "\x1b[31m-old line\x1b[0m" in raw
    assert (host.later(0.5) or "").endswith("run_command(command='pytest') · 1.0 s")
    host.assert_whole_lines_only()


def test_thinking_reasoning_and_a_retry_move_in_the_activity_and_leave_one_line_each() -> None:
    host = Host()
    host.feed(START)
    assert re.fullmatch(SPINNING + r" thinking… 3 s", host.later(3.0) or "")
    host.feed(ModelRetry(turn_id="t", attempt=1, max_attempts=3, delay_seconds=4.0, reason="busy"))
    assert host.lines() == ["tether: retrying in 4 s (1/3): busy"]
    assert host.later(1.5) == "↻ retrying in 3 s (1/3): busy"
    host.feed(ItemStarted(turn_id="t", item=Reasoning(id="r")))
    host.feed(ItemDelta(turn_id="t", item_id="r", delta="First I look\nat the tests"))
    assert host.later(2.0) == "✻ reasoning… 2 s"
    host.feed(ItemCompleted(turn_id="t", item=Reasoning(id="r", text="First I look")))
    host.feed(ItemStarted(turn_id="t", item=AgentMessage(id="m")))
    assert re.fullmatch(SPINNING + r" replying…", host.later(0.1) or "")
    host.feed(ItemCompleted(turn_id="t", item=AgentMessage(id="m", text="Done.")), END)
    assert host.lines() == ["tether: retrying in 4 s (1/3): busy", "✻ reasoned for 2 s", "Done."]
    assert "\x1b[2m✻ reasoned for 2 s\x1b[0m" in host.stream.getvalue()  # dimmed
    assert host.later(1.0) is None  # the turn is over
    assert not host.renderer.wants_ticks
    host.assert_whole_lines_only()


def test_no_activity_while_an_approval_is_asked() -> None:
    host = Host()
    approval = ApprovalRequest(
        id="a1",
        turn_id="t",
        item_id="c",
        tool="run_command",
        arguments=PYTEST,
        kind="command",
        reason="commands ask first",
        command="pytest",
    )
    host.feed(START, ItemStarted(turn_id="t", item=call()), ApprovalRequested(approval=approval))
    assert host.later(1.0) is None
    assert host.lines()[-1] == "  why: commands ask first"
    host.feed(ApprovalResolved(approval_id="a1", turn_id="t", decision="allow", by="cli"))
    assert (host.later(0.1) or "").endswith("run_command(command='pytest') · 1.1 s")
    host.assert_whole_lines_only()


def test_a_superseded_reply_is_never_erased() -> None:
    host = Host()
    host.feed(START, ItemStarted(turn_id="t", item=AgentMessage(id="m")))
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="Broken\n\noff\n"))
    broken = AgentMessage(id="m", text="Broken\n\noff\n", superseded=True)
    host.feed(ItemCompleted(turn_id="t", item=broken))
    assert host.lines() == [
        "Broken",
        "tether: (the reply above broke off; the retried reply replaces it)",
    ]
    # One that printed nothing yet goes without a word.
    host.feed(ItemStarted(turn_id="t", item=AgentMessage(id="n")))
    host.feed(ItemDelta(turn_id="t", item_id="n", delta="Half a"))
    host.feed(ItemCompleted(turn_id="t", item=msgspec.structs.replace(broken, id="n")))
    assert len(host.lines()) == 2
    host.assert_whole_lines_only()


def test_plain_text_is_written_a_whole_line_at_a_time() -> None:
    host = Host(styled=False)
    host.feed(START, ItemStarted(turn_id="t", item=AgentMessage(id="m")))
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="one li"))
    assert host.stream.getvalue() == ""
    host.feed(ItemDelta(turn_id="t", item_id="m", delta="ne\ntwo"))
    assert host.stream.getvalue() == "one line\n"
    host.feed(ItemCompleted(turn_id="t", item=AgentMessage(id="m", text="one line\ntwo")))
    failing = call()
    host.feed(ItemStarted(turn_id="t", item=failing))
    host.feed(ModelRetry(turn_id="t", attempt=1, max_attempts=2, delay_seconds=1.0, reason="x"))
    host.feed(done(failing, exit_code=2, duration_seconds=1.0, output="exit code 2\nE"), END)
    assert host.stream.getvalue() == (
        "one line\ntwo\n"
        "tether: retrying in 1 s (1/2): x\n"
        "✗ run_command(command='pytest') exit 2 · 1.0 s\n"
        "  │ E\n"
    )
    host.assert_whole_lines_only()
    assert "\x1b" not in host.stream.getvalue()
