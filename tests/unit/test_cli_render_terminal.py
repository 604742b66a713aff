"""What a person sees of a turn: on a terminal (a rich console forced to one, read back
through a screen model) Markdown, one live line per tool call with a spinner and elapsed
time, ✓/✗ with exit codes, coloured diffs, dimmed reasoning, a thinking indicator and a retry
countdown; in plain output the same facts without one escape sequence, the answer alone on
stdout."""

import io
import re
import subprocess
import sys

import msgspec
import pytest

from tests.unit.test_cli_render import screen
from tether.clients.cli.render import Renderer, color_allowed
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ModelRetry,
    TurnCompleted,
    TurnStarted,
)
from tether.protocol.items import AgentMessage, Reasoning, ToolCall
from tether.protocol.methods import SessionEventParams

SGR = re.compile(r"\x1b\[[0-9;]*m")
PYTEST = '{"command": "pytest"}'
DIFF = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n keep\n-old line\n+new line\n"
ANSWER = "# Result\n\nThe tests *pass* now.\n\n```python\ndef f():\n    return 1\n```\n"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Term:
    """A renderer whose stdout and stderr are one terminal (or two plain streams)."""

    def __init__(
        self, *, styled: bool = True, split: bool = False, size: tuple[int, int] = (80, 24)
    ):
        self.clock = Clock()
        self.screen_out = io.StringIO()
        self.out = io.StringIO() if split else self.screen_out
        self.err = io.StringIO() if split else self.screen_out
        self.size = size
        self.renderer = Renderer(
            out=self.out,
            err=self.err,
            live=styled,
            status_live=styled,
            color=styled,
            clock=self.clock,
            terminal_size=lambda: size,
        )
        self.seq = 0

    def feed(self, *events: AnyEvent) -> None:
        for event in events:
            self.seq += 1
            self.renderer.event(
                SessionEventParams(session_id="s", epoch="e", seq=self.seq, event=event)
            )

    def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        self.renderer.tick(self.clock.now)

    def shown(self) -> list[str]:
        return screen(self.screen_out.getvalue(), self.size[0])


def call(item_id: str = "c", tool: str = "run_command", arguments: str = PYTEST) -> ToolCall:
    return ToolCall(id=item_id, call_id=item_id, tool=tool, arguments=arguments)


def done(item: ToolCall, **fields: object) -> ItemCompleted:
    return ItemCompleted(
        turn_id="t", item=msgspec.structs.replace(item, status="completed", **fields)
    )


def message(item_id: str, *pieces: str) -> list[AnyEvent]:
    return [
        ItemStarted(turn_id="t", item=AgentMessage(id=item_id)),
        *(ItemDelta(turn_id="t", item_id=item_id, delta=p) for p in pieces),
        ItemCompleted(turn_id="t", item=AgentMessage(id=item_id, text="".join(pieces))),
    ]


PYTEST_APPROVAL = ApprovalRequest(
    id="a1",
    turn_id="t",
    item_id="c",
    tool="run_command",
    arguments=PYTEST,
    kind="command",
    reason="commands ask first",
    command="pytest",
)
START = TurnStarted(turn_id="t", started_at=0.0)
END = TurnCompleted(turn_id="t", status="completed", ended_at=1.0)


def test_markdown_is_rendered_as_it_streams_with_highlighted_code() -> None:
    term = Term(split=True)
    pieces = [ANSWER[i : i + 5] for i in range(0, len(ANSWER), 5)]
    term.feed(START, *message("m", *pieces), END)
    out = term.out.getvalue()
    assert "\x1b[1;4mResult\x1b[0m" in out  # the heading, bold and underlined
    assert "\x1b[3mpass\x1b[0m" in out  # emphasis in italics
    for marker in ("# Result", "```", "*pass*"):
        assert marker not in out
    code = next(line for line in out.split("\n") if "def" in line)
    assert len(SGR.findall(code)) > 4, "the code block is highlighted"
    assert [line.strip() for line in screen(out, 80)] == [
        "Result",
        "The tests pass now.",
        "def f():",
        "return 1",
    ]
    assert SGR.sub("", out).count("The tests pass now.") == 1


def test_finished_blocks_are_printed_while_the_reply_streams() -> None:
    term = Term(split=True)
    term.feed(START, ItemStarted(turn_id="t", item=AgentMessage(id="m")))
    term.feed(ItemDelta(turn_id="t", item_id="m", delta="First paragraph.\n\nSecond"))
    assert term.out.getvalue() == ""  # the first block may go on
    assert "First paragraph." in term.err.getvalue()  # shown in the live region meanwhile
    term.feed(ItemDelta(turn_id="t", item_id="m", delta=" one.\n\n```\nco"))
    assert SGR.sub("", term.out.getvalue()) == "First paragraph.\n\nSecond one.\n"


def test_a_running_command_has_one_line_with_a_spinner_time_and_its_output_tail() -> None:
    term = Term()
    running = call()
    term.feed(START, ItemStarted(turn_id="t", item=running))
    output = "".join(f"line {n}\n" for n in range(1, 9))
    term.feed(ItemDelta(turn_id="t", item_id="c", delta=output))
    term.tick(2.3)
    shown = term.shown()
    assert re.fullmatch(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] run_command\(command='pytest'\) · 2\.3 s", shown[0])
    assert shown[1:] == [f"  │ line {n}" for n in range(4, 9)]  # the last five lines
    term.tick(1.0)
    assert term.shown()[0].endswith("· 3.3 s")
    # On success the call's one line keeps the last three lines below it.
    term.feed(done(running, exit_code=0, duration_seconds=3.3, output="exit code 0 · 3.3 s\nok"))
    first, *tail, waiting = term.shown()
    assert first == "✓ run_command(command='pytest') exit 0 · 3.3 s"
    assert tail == [f"  │ line {n}" for n in range(6, 9)]
    assert re.fullmatch(r". thinking… 0 s", waiting)  # the next model call


def test_a_failing_command_shows_its_exit_code_in_red_and_its_tail() -> None:
    term = Term()
    running = call()
    term.feed(START, ItemStarted(turn_id="t", item=running))
    term.feed(ItemDelta(turn_id="t", item_id="c", delta="collected 3 items\nFAILED test_a\n"))
    term.feed(done(running, exit_code=1, duration_seconds=2.3, output="exit code 1 · 2.3 s\nx"))
    term.feed(*message("m", "Fixed."), END)
    assert term.shown() == [
        "✗ run_command(command='pytest') exit 1 · 2.3 s",
        "  │ collected 3 items",
        "  │ FAILED test_a",
        "Fixed.",
    ]
    assert "\x1b[1;31m✗ \x1b[0m" in term.screen_out.getvalue()
    assert "\x1b[31m exit 1 · 2.3 s\x1b[0m" in term.screen_out.getvalue()


def test_every_edit_shows_a_coloured_diff() -> None:
    term = Term()
    edit = call("e", "edit_file", '{"path": "a.py"}')
    term.feed(START, ItemStarted(turn_id="t", item=edit), done(edit, diff=DIFF), END)
    raw = term.screen_out.getvalue()
    assert term.shown() == ["✓ edit_file(path='a.py')", *DIFF.rstrip("\n").split("\n")]
    assert "\x1b[31m-old line\x1b[0m" in raw
    assert "\x1b[32m+new line\x1b[0m" in raw
    assert "\x1b[36m@@ -1,2 +1,2 @@\x1b[0m" in raw
    assert "\x1b[1m+++ b/a.py\x1b[0m" in raw


def test_thinking_until_the_first_token_and_a_retry_counts_down() -> None:
    term = Term()
    term.feed(START)
    term.tick(3.0)
    assert re.fullmatch(r". thinking… 3 s", term.shown()[-1])
    term.feed(ModelRetry(turn_id="t", attempt=1, max_attempts=3, delay_seconds=4.0, reason="busy"))
    assert term.shown()[-1] == "↻ retrying in 4 s (1/3): busy"
    term.tick(1.5)
    assert term.shown()[-1] == "↻ retrying in 3 s (1/3): busy"
    term.feed(*message("m", "Answer."), END)
    assert term.shown() == ["Answer."]


def test_reasoning_is_dimmed_while_it_streams_and_collapses_to_a_line() -> None:
    term = Term()
    term.feed(START, ItemStarted(turn_id="t", item=Reasoning(id="r")))
    term.feed(ItemDelta(turn_id="t", item_id="r", delta="First I look\nat the tests"))
    assert "\x1b[2;3m  at the tests\x1b[0m" in term.screen_out.getvalue()
    term.tick(2.0)
    term.feed(ItemCompleted(turn_id="t", item=Reasoning(id="r", text="First I look\nat the tests")))
    term.feed(*message("m", "Done."), END)
    assert term.shown() == ["✻ reasoned for 2 s", "Done."]


def test_an_approval_hides_the_live_region_until_the_next_tick() -> None:
    term = Term()
    running = call()
    approval = PYTEST_APPROVAL
    term.feed(START, ItemStarted(turn_id="t", item=running), ApprovalRequested(approval=approval))
    term.tick(5.0)
    assert term.shown()[-1] == "  why: commands ask first"  # the question stays last
    assert not term.renderer.wants_ticks
    term.feed(ApprovalResolved(approval_id="a1", turn_id="t", decision="allow", by="cli"))
    term.screen_out.write("(the prompt's own line)\n")
    term.tick(0.5)
    assert term.shown()[-3:-1] == ["tether:   allowed by cli", "(the prompt's own line)"]
    assert term.shown()[-1].startswith(("⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"))


def test_the_question_stays_last_whatever_else_is_printed_or_live() -> None:
    term = Term()
    asked, other = call(), call("d", arguments='{"command": "make"}')
    approval = PYTEST_APPROVAL
    term.feed(START, ItemStarted(turn_id="t", item=other), ItemStarted(turn_id="t", item=asked))
    term.renderer.pending_approval(approval)  # pending when the client attached
    term.renderer.question("allow? [y]es / [N]o (Enter = no): ")
    term.tick(1.0)
    term.feed(ItemDelta(turn_id="t", item_id="d", delta="building\n"))
    term.tick(1.0)
    assert term.shown()[-2:] == ["  why: commands ask first", "allow? [y]es / [N]o (Enter = no):"]
    term.feed(done(other, exit_code=0, duration_seconds=2.0))
    term.renderer.note("a line of the answerer's")
    shown = term.shown()
    assert shown[-1] == "allow? [y]es / [N]o (Enter = no):"
    assert shown[-4].startswith("✓ run_command(command='make')")
    assert shown[-3] == "  │ building"
    assert shown[-2] == "a line of the answerer's"
    assert sum("allow?" in line for line in shown) == 1  # taken off, drawn again below
    assert not any("pytest" in line and "·" in line for line in shown)  # no spinner drawn


def plain_events() -> list[AnyEvent]:
    failing = call()
    edit = call("e", "edit_file", '{"path": "a.py"}')
    return [
        START,
        ItemStarted(turn_id="t", item=Reasoning(id="r")),
        ItemDelta(turn_id="t", item_id="r", delta="hmm"),
        ItemCompleted(turn_id="t", item=Reasoning(id="r", text="hmm")),
        ItemStarted(turn_id="t", item=failing),
        ItemDelta(turn_id="t", item_id="c", delta="E   assert 1 == 2\n"),
        done(failing, exit_code=1, duration_seconds=2.3, output="exit code 1 · 2.3 s\nE"),
        ItemStarted(turn_id="t", item=edit),
        done(edit, diff=DIFF),
        ModelRetry(turn_id="t", attempt=1, max_attempts=3, delay_seconds=1.0, reason="busy"),
        *message("m", ANSWER[:20], ANSWER[20:]),
        END,
    ]


@pytest.mark.parametrize("live", [True, False])
def test_plain_output_has_no_escape_codes_and_only_the_answer_on_stdout(live: bool) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    out_text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    err_text = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    renderer = Renderer(out=out_text, err=err_text, live=live, status_live=live, color=False)
    for seq, event in enumerate(plain_events(), 1):
        renderer.event(SessionEventParams(session_id="s", epoch="e", seq=seq, event=event))
    assert b"\x1b" not in out.getvalue() + err.getvalue()
    assert out.getvalue().decode() == ANSWER
    assert err.getvalue().decode() == (
        "✗ run_command(command='pytest') exit 1 · 2.3 s\n"
        "  │ E   assert 1 == 2\n"
        "✓ edit_file(path='a.py')\n"
        f"{DIFF}"
        "tether: retrying in 1 s (1/3): busy\n"
    )


def test_no_color_in_the_environment_means_plain() -> None:
    assert color_allowed({"TERM": "xterm-256color"})
    assert not color_allowed({"NO_COLOR": "1", "TERM": "xterm-256color"})
    assert not color_allowed({"TERM": "dumb"})
    assert color_allowed({"NO_COLOR": ""})  # set but empty does not count


def test_plain_rendering_does_not_import_rich() -> None:
    events = [
        SessionEventParams(session_id="s", epoch="e", seq=n, event=event)
        for n, event in enumerate(plain_events(), 1)
    ]
    code = (
        "import io, sys, msgspec\n"
        "from tether.clients.cli.render import Renderer\n"
        "from tether.protocol.methods import SessionEventParams\n"
        "r = Renderer(out=io.StringIO(), err=io.StringIO())\n"  # not terminals
        "for params in msgspec.json.decode(sys.stdin.buffer.read(),"
        " type=list[SessionEventParams]):\n"
        "    r.event(params)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pygments')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        input=msgspec.json.encode(events),
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.decode().strip() == "[]"


@pytest.mark.parametrize("verbose", [False, True])
def test_a_command_that_succeeded_keeps_its_last_lines_and_all_with_verbose(
    verbose: bool,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out=out, err=err, live=False, status_live=False, verbose=verbose)
    running = call()
    streamed = "".join(f"line {n}\n" for n in range(1, 11))
    for seq, event in enumerate(
        [
            START,
            ItemStarted(turn_id="t", item=running),
            ItemDelta(turn_id="t", item_id="c", delta=streamed),
            done(running, exit_code=0, duration_seconds=1.0, output="exit code 0\n" + streamed),
        ]
    ):
        renderer.event(SessionEventParams(session_id="s", epoch="e", seq=seq, event=event))
    shown = [line for line in err.getvalue().splitlines() if "│" in line]
    kept = range(1, 11) if verbose else range(8, 11)
    assert shown == [f"  │ line {n}" for n in kept]
