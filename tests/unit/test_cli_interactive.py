"""The interactive mode's parts that need no terminal: the line-holding stream, path
completion, the status line, the slash table, and that only `tether chat` loads it."""

import subprocess
import sys
from pathlib import Path

from tether.clients.cli.interactive.completion import WorkspaceFiles, matching_paths
from tether.clients.cli.interactive.leaving import SecondCtrlC
from tether.clients.cli.interactive.output import TerminalLines
from tether.clients.cli.interactive.picker import window_start
from tether.clients.cli.interactive.slash import COMMANDS, parse
from tether.clients.cli.interactive.state import ChatState
from tether.clients.cli.main import _interactive
from tether.protocol.events import ContextMeter, ContextUpdated, TurnCompleted, TurnStarted, Usage
from tether.protocol.session import SessionInfo


def test_whole_lines_go_out_and_the_partial_one_is_held() -> None:
    emitted: list[str] = []
    lines = TerminalLines(emitted.append, lambda: None)
    lines.write("Hello, wor")
    lines.flush()
    assert (emitted, lines.tail) == ([], "Hello, wor")
    lines.write("ld.\nNext")
    lines.note("tether: a note")  # above the held line, which stays held
    lines.flush()
    assert emitted == ["Hello, world.\n", "tether: a note\n"]
    assert lines.tail == "Next"


def test_paths_complete_by_prefix_then_name_then_anywhere(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("")
    (tmp_path / "apple.txt").write_text("")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "app.js").write_text("")
    paths = WorkspaceFiles(tmp_path).paths()
    assert "node_modules/" not in paths
    assert "node_modules/app.js" not in paths
    assert matching_paths(paths, "ap") == ["apple.txt", "src/app.py"]
    assert matching_paths(paths, "src/") == ["src/", "src/app.py"]
    assert matching_paths(paths, "pp.p") == ["src/app.py"]


def test_the_status_line_shows_model_mode_context_tokens_session_and_other_clients() -> None:
    state = ChatState()
    assert "new session" in state.status_line()
    state.from_info(
        SessionInfo(
            id="s_1", created_at=0, updated_at=0, permission_mode="auto", model="m1", clients=3
        )
    )
    state.apply(ContextUpdated(context=ContextMeter(used=250, budget=1000)), 0.0)
    state.apply(
        TurnCompleted(
            turn_id="t", status="completed", ended_at=0, usage=Usage(input_tokens=12_345)
        ),
        0.0,
    )
    line = state.status_line()
    for part in ("m1", "mode auto", "context 25%", "12k in / 0 out", "s_1", "2 other clients"):
        assert part in line, (part, line)
    state.apply(TurnStarted(turn_id="t2", started_at=0), 0.0)
    assert "12k in / 0 out before this turn" in state.status_line()


def test_the_status_line_says_nothing_of_a_mode_or_tokens_not_known_yet() -> None:
    state = ChatState()
    assert state.status_line() == "default model · context - · new session"
    state.apply(TurnStarted(turn_id="t", started_at=0), 0.0)
    assert " in / " not in state.status_line()  # counted when the turn ends


def test_slash_commands_parse_from_the_one_table() -> None:
    command, name, argument = parse("/model  gpt-x ")
    assert command is not None
    assert (command.name, name, argument) == ("/model", "/model", "gpt-x")
    assert parse("/nope")[0] is None
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)


def test_the_picker_scrolls_with_its_selection() -> None:
    assert window_start(0, 5) == 0
    assert window_start(15, 30) == 10
    assert window_start(29, 30) == 20


def test_tether_alone_or_with_only_a_workspace_is_the_interactive_mode() -> None:
    assert _interactive([])
    assert _interactive(["-w", "/tmp"])
    assert _interactive(["--workspace=/tmp"])
    assert not _interactive(["run", "hi"])
    assert not _interactive(["-w", "/tmp", "sessions"])


def test_tether_run_loads_neither_prompt_toolkit_nor_asyncio() -> None:
    code = (
        "import sys\n"
        "from tether.clients.cli import commands\n"
        "commands.load('turns.cmd_run')\n"
        "print(','.join(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('prompt_toolkit', 'asyncio'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_a_second_ctrl_c_leaves_while_its_hint_is_shown_counted_from_its_first_draw() -> None:
    now = [100.0]
    ctrl_c = SecondCtrlC(window=3.0, clock=lambda: now[0])
    assert not ctrl_c.armed()
    assert not ctrl_c.hint_drawn()
    ctrl_c.press()
    # The machine is busy: the hint is first drawn 10 s after the press. It shows all the same,
    # and the window runs from then.
    now[0] += 10
    assert ctrl_c.hint_drawn()
    now[0] += 2.9
    assert ctrl_c.hint_drawn()
    assert ctrl_c.armed()
    now[0] += 0.2
    assert not ctrl_c.hint_drawn()
    assert not ctrl_c.armed(), "the hint is gone, and so is the second press"
    # Pressed twice before any draw: the second leaves.
    ctrl_c.press()
    assert ctrl_c.armed()
    # Typing in between makes the next press a first one again.
    ctrl_c.forget()
    assert not ctrl_c.armed()
    assert not ctrl_c.hint_drawn()
