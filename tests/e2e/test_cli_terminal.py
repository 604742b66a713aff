"""The CLI on a real pseudo-terminal against the real daemon: approvals asked at attach and
one at a time, what the question offers, and what Ctrl-C does in `attach` and in `run`."""

import os
import re
import termios
from pathlib import Path

import pytest

from tests.e2e.test_approvals import wait_for_approval, waiting_session
from tests.support import (
    REPO,
    DaemonProcess,
    Home,
    attach,
    cli,
    command_step,
    create_session,
    read_snapshot,
)
from tests.terminal import TerminalCli
from tether.protocol.methods import (
    SESSION_LIST,
    TURN_CANCEL,
    TURN_START,
    TurnCancelParams,
    TurnStartParams,
)
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

QUESTION_END = "[N]o (Enter = no): "


def model_saw(model_server: ModelServer, request: int) -> str:
    """The last message of the model's `request`th request (the tool's result)."""
    model_server.wait_for_requests(request + 1)
    content = model_server.requests[request]["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


def test_attach_asks_at_once_for_an_approval_already_pending_and_enter_means_no(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    long_tail = " ".join(f"word{i:03d}" for i in range(40))  # far past the call line's cut
    command = f"echo first line\necho {long_tail}"
    model_server.set_script({"steps": [command_step(command), {"text": "done"}]})
    session_id, approval = waiting_session(daemon)
    with TerminalCli(home, "attach", "-w", str(workspace), session_id) as cli:
        shown = cli.expect(QUESTION_END)
        assert f"approval needed [{approval.id}] run_command: echo first line" in shown
        assert f"  │ echo {long_tail}\n" in shown
        rule = approval.always_rule.replace("\n", "\\n")  # kept on one line, escaped
        assert rule.startswith("run_command(echo first line\\necho word000")
        assert f"always would allow: {rule}" in shown
        assert f"allow? [y]es / [a]lways {rule} / {QUESTION_END}" in shown
        cli.send("\n")
        cli.expect("tether:   denied: denied at the terminal")
        assert cli.wait() == 0
    assert "denied at the terminal" in model_saw(model_server, 1)


def test_attach_draws_nothing_over_a_pending_approvals_question(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo asked"), {"text": "done"}]})
    session_id, approval = waiting_session(daemon)
    with TerminalCli(home, "attach", "-w", str(workspace), session_id) as cli:
        shown = cli.expect(QUESTION_END)
        assert "always would allow: run_command(echo asked)" in shown
        cli.send("y")
        # Up to the answer, nothing was drawn after the question (no spinner, no erasing).
        answered = cli.expect("tether:   allowed")
        assert answered.startswith("y\n"), answered
        assert not re.search(r"\x1b\[\d*[AJK]", answered), answered
        cli.expect("done")
        assert cli.wait() == 0
    assert "allowed by" not in cli.shown  # answered here, not by a client's name
    after = cli.shown.split(QUESTION_END)[0]
    assert f"approval needed [{approval.id}]" in after


def test_one_key_answers_in_run_and_enter_is_the_default_shown(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        {"steps": [command_step("echo one"), command_step("echo two"), {"text": "done"}]}
    )
    with TerminalCli(home, "run", "-w", str(workspace), "go") as cli:
        cli.expect(QUESTION_END)
        cli.send("a")  # no Enter: the key alone answers
        cli.expect("tether:   allowed (from now on, the session allows run_command(echo one))")
        cli.expect(QUESTION_END)
        cli.send("\r")  # Enter: the default, no
        cli.expect("tether:   denied: denied at the terminal")
        cli.expect("done")
        assert cli.wait() == 0
    assert "exit code 0" in model_saw(model_server, 1)
    assert "denied at the terminal" in model_saw(model_server, 2)


def test_the_question_escapes_control_characters_and_offers_always_only_with_a_rule(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        {"steps": [command_step("echo harmless\x1b[2K\rrm -rf ~/gone"), {"text": "done"}]}
    )
    session_id, approval = waiting_session(daemon)
    assert approval.always_rule == ""
    with TerminalCli(home, "attach", "-w", str(workspace), session_id) as cli:
        shown = cli.expect(QUESTION_END)
        assert "echo harmless\\x1b[2K\\rrm -rf ~/gone" in shown
        assert "\x1b[2K" not in shown
        assert f"allow? [y]es / {QUESTION_END}" in shown
        cli.send("a")  # no rule to allow always: asked again, nothing sent
        cli.expect("answer y or n (Enter = no): ")
        with daemon.client() as client:
            assert read_snapshot(client, session_id).pending_approvals
        cli.send("y")
        cli.expect("tether:   allowed")
        assert cli.wait() == 0
    assert "exit code 0" in model_saw(model_server, 1)


def test_attach_shows_the_diff_of_a_pending_edit_once(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    content = "step one\nstep two\n"
    edit = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "notes/plan.txt", "content": content}}
        ]
    }
    model_server.set_script({"steps": [edit, {"text": "written"}]})
    with daemon.client("starter") as starter:
        session_id = create_session(starter)
        attach(starter, session_id)
        starter.call(
            TURN_START,
            TurnStartParams(session_id=session_id, text="plan", permission_mode="ask"),
        )
        wait_for_approval(starter, session_id)
    with TerminalCli(home, "attach", "-w", str(workspace), session_id) as cli:
        shown = cli.expect(QUESTION_END)
        assert "write_file: notes/plan.txt" in shown
        assert "+step one\n+step two\n" in re.sub(r"\x1b\[[0-9;]*m", "", shown)
        cli.send("y")
        cli.expect("written")
        assert cli.wait() == 0
    plain = re.sub(r"\x1b\[[0-9;]*m", "", cli.shown)
    assert plain.count("+step one\n") == 1, plain  # the diff allowed is not printed again
    assert "✓ write_file(path='notes/plan.txt'" in plain
    assert (workspace / "notes" / "plan.txt").read_text() == content


def test_two_approvals_at_once_are_asked_one_after_the_other(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    (workspace / ".env").write_text("TOKEN=one\n")
    (workspace / "src" / ".env").write_text("TOKEN=two\n")
    reads = {
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": ".env"}},
            {"name": "read_file", "arguments": {"path": "src/.env"}},
        ]
    }
    model_server.set_script({"steps": [reads, {"text": "done"}]})
    paths = [".env", "src/.env"]
    with TerminalCli(home, "run", "-w", str(workspace), "read both") as cli:
        first = cli.expect(QUESTION_END)
        asked = [p for p in paths if f"read_file: {p}\n" in first]
        assert len(asked) == 1, first  # the second waits behind the first
        cli.send("y")
        second = cli.expect(QUESTION_END)
        # Asked only now, so described again right above its question.
        (later,) = set(paths) - set(asked)
        assert "approval needed [" in second
        assert f"read_file: {later}\n" in second.split("tether:   allowed")[-1]
        cli.send("n")
        cli.expect("done")
        assert cli.wait() == 0
    results = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    allowed, denied = results if asked == [".env"] else results[::-1]
    assert ("TOKEN=one" if asked == [".env"] else "TOKEN=two") in allowed
    assert "denied at the terminal" in denied


def test_ctrl_c_in_attach_leaves_the_turn_running_and_says_how_to_stop_it(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo later"), {"text": "done"}]})
    session_id, approval = waiting_session(daemon)
    # What this asserts is what follows a detach, not how long a second Ctrl-C may take.
    quick = {"TETHER_DETACH_WINDOW": "0.1"}
    with TerminalCli(home, "attach", "-w", str(workspace), session_id, env=quick) as cli:
        cli.expect(QUESTION_END)
        # Else the terminal may throw the detach notice away after SIGINT (see keep_output).
        assert cli.program.local_modes() & termios.NOFLSH
        cli.send("\x03")
        shown = cli.expect("cancels it now)")
        assert "detached; the turn goes on" in shown
        assert "(Ctrl-C again within 0.1 s cancels it now)" in shown
        assert f"`tether cancel {session_id}` stops it" in shown
        cli.expect(f"tether approve {session_id} {approval.id}")
        assert cli.wait() == 130
    with daemon.client() as client:
        snapshot = read_snapshot(client, session_id)
        assert snapshot.turns[-1].status == "running"
        assert [a.id for a in snapshot.pending_approvals] == [approval.id]
        client.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))


def test_a_second_ctrl_c_in_attach_cancels_the_turn(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo never"), {"text": "never"}]})
    session_id, _ = waiting_session(daemon)
    # A window the second Ctrl-C cannot miss on a loaded machine (it ends the wait at once).
    patient = {"TETHER_DETACH_WINDOW": "30"}
    with TerminalCli(home, "attach", "-w", str(workspace), session_id, env=patient) as cli:
        cli.expect(QUESTION_END)
        cli.send("\x03")
        cli.expect("within 30 s cancels it now)")
        cli.send("\x03")
        cli.expect("cancelling turn")
        assert cli.wait() == 3
    with daemon.client() as client:
        assert read_snapshot(client, session_id).turns[-1].status == "cancelled"


def test_ctrl_c_in_run_on_a_terminal_cancels_the_turn(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo never"), {"text": "never"}]})
    with TerminalCli(home, "run", "-w", str(workspace), "go") as cli:
        cli.expect(QUESTION_END)
        cli.send("\x03")
        cli.expect("cancelling (Ctrl-C again to leave it)")
        shown = cli.expect("continue`")
        assert "turn cancelled (session" in shown
        assert cli.wait() == 3


class PausedRun:
    """`tether run` on a terminal, paused once it has sent `method` (`tests.paused_cli`)
    until `release`. The test holds the FIFO open for both reading and writing, so that
    releasing never waits, even for a CLI that is gone."""

    def __init__(self, home: Home, workspace: Path, fifo: Path, method: str) -> None:
        os.mkfifo(fifo)
        self.fifo = os.open(fifo, os.O_RDWR)
        self.cli = TerminalCli(
            home,
            method,
            str(fifo),
            *("run", "-w", str(workspace), "go"),
            module="tests.paused_cli",
            env={"PYTHONPATH": str(REPO)},
        )
        self.cli.expect(f"paused after {method}")

    def release(self) -> None:
        os.write(self.fifo, b"go on\n")

    def __enter__(self) -> TerminalCli:
        return self.cli

    def __exit__(self, *exc: object) -> None:
        self.cli.close()
        os.close(self.fifo)


def sent_ctrl_c(cli: TerminalCli) -> None:
    """Press Ctrl-C, and wait until the terminal has acted on it: the line discipline handles
    typed characters after the write returns, and it sends SIGINT before it echoes `^C`."""
    cli.send("\x03")
    cli.expect("^C")


def session_ids(daemon: DaemonProcess) -> set[str]:
    with daemon.client() as client:
        return {s.id for s in client.call(SESSION_LIST).sessions}


def test_ctrl_c_as_run_starts_its_turn_cancels_the_turn(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    """Ctrl-C once the turn was asked for, before the CLI follows it: the turn is cancelled,
    not left waiting for an approval nobody sees."""
    model_server.set_script({"steps": [command_step("echo never"), {"text": "never"}]})
    before = session_ids(daemon)
    paused = PausedRun(home, workspace, tmp_path / "release", "turn/start")
    with paused as cli:
        sent_ctrl_c(cli)
        paused.release()
        shown = cli.expect("continue`")
        assert "turn cancelled (session" in shown
        assert cli.wait() == 3
    (session_id,) = session_ids(daemon) - before
    with daemon.client() as client:
        (turn,) = read_snapshot(client, session_id).turns
    assert turn.status == "cancelled"


def test_ctrl_c_as_run_creates_its_session_leaves_no_session(
    daemon: DaemonProcess, home: Home, workspace: Path, tmp_path: Path
) -> None:
    before = session_ids(daemon)
    paused = PausedRun(home, workspace, tmp_path / "release", "session/create")
    with paused as cli:
        sent_ctrl_c(cli)
        paused.release()
        assert cli.wait() == 130
    assert session_ids(daemon) == before


def test_ctrl_c_while_run_starts_the_daemon_leaves_no_empty_session(
    home: Home, workspace: Path, tmp_path: Path
) -> None:
    assert home.read_discovery(workspace) is None  # `tether run` starts the daemon
    paused = PausedRun(home, workspace, tmp_path / "release", "session/create")
    try:
        with paused as terminal:
            sent_ctrl_c(terminal)
            paused.release()
            assert terminal.wait() == 130
        listed = cli(home, "sessions", "--json", "-w", str(workspace))
        assert (listed.returncode, listed.stdout.strip()) == (0, "[]")
    finally:
        cli(home, "daemon", "stop", "-w", str(workspace))


def test_sessions_on_a_terminal_has_a_header_over_its_columns(
    daemon: DaemonProcess, home: Home, workspace: Path
) -> None:
    with daemon.client() as client:
        session_id = create_session(client)
    with TerminalCli(home, "sessions", "-w", str(workspace)) as cli:
        header = cli.expect("TITLE")
        assert header.startswith("SESSION"), header
        assert "STATE" in header
        assert "MODEL" in header
        cli.expect(session_id)
        assert cli.wait() == 0


@pytest.mark.parametrize("quiet", [False, True])
def test_run_rings_the_bell_when_an_approval_waits_unless_quiet(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    quiet: bool,
) -> None:
    model_server.set_script({"steps": [command_step("echo rung"), {"text": "done"}]})
    args = ["run", "-w", str(workspace), *(["--quiet"] if quiet else []), "go"]
    with TerminalCli(home, *args) as cli:
        asked = cli.expect(QUESTION_END)
        cli.send("y")
        cli.expect("done")
        assert cli.wait() == 0
    assert "\a" not in cli.shown.replace(asked, "")  # the bell is for the request alone
    if quiet:
        assert "\a" not in asked
    else:
        assert asked.count("\a") == 1
        assert asked.index("\a") < asked.index("allow? [y]es")
