"""The CLI's approvals across clients, against the real daemon: `tether run` without a terminal
leaving an approval to another client (`--approval-timeout`), `tether approvals`, and `tether
approve|deny` without a session. All share the module's daemon: the tests of those commands act
on every pending approval of the workspace, which holds only their own, since the turns each
test leaves running are cancelled after it (`DaemonProcess.cancel_turns`)."""

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from tests.e2e.test_approvals import respond, wait_for_approval, waiting_session
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    command_step,
    create_session,
    read_snapshot,
)
from tests.terminal import TerminalCli
from tether.clients.cli.approvals import ApprovalAnswerer
from tether.clients.cli.render import describe_approval
from tether.protocol.events import ApprovalRequest
from tether.protocol.methods import PendingApproval
from tether.testing import ModelServer

ANSWER_LINE = re.compile(r"`tether approve (s_\w+) (a_\w+)` or `tether deny \1 \2`")


class RunningCli:
    """`tether run` (or another `command` that follows a turn, `attach`) without a terminal
    (stdin closed), its stderr read line by line as it comes."""

    def __init__(self, home: Home, *args: str, command: str = "run") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "tether.clients.cli.main", command, *args],
            env=home.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """The first stderr line matching `pattern`, once it has been printed."""
        found: list[re.Match[str]] = []

        def matched() -> bool:
            found[:] = [m for line in self.lines if (m := re.search(pattern, line))]
            return bool(found) or self.proc.poll() is not None

        with self._changed:
            self._changed.wait_for(matched, timeout)
        assert found, f"no line matches {pattern!r}:\n{''.join(self.lines)}"
        return found[0]

    def finish(self, timeout: float = 20.0) -> tuple[int, str, str]:
        """Exit code, stdout and stderr, once it has ended."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code, out, "".join(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def tool_result(model_server: ModelServer, request: int = 1) -> str:
    content = model_server.requests[request]["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


# --- tether run --approval-timeout -----------------------------------------------------------


@pytest.mark.shared_daemon
def test_run_without_a_terminal_waits_for_another_client_to_answer(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo answered-elsewhere"), {"text": "ok"}]})
    run = RunningCli(home, "-w", str(workspace), "--approval-timeout", "60", "go")
    try:
        waiting = run.wait_for_line(ANSWER_LINE.pattern)
        assert "waiting up to 60 s for another client to answer" in waiting.string
        session_id, approval_id = waiting.groups()
        approved = cli(home, "approve", "-w", str(workspace), session_id, approval_id)
        assert approved.returncode == 0, approved.stderr
        code, out, err = run.finish()
    finally:
        run.close()
    assert code == 0, err
    assert "ok" in out
    assert "allowed by another tether terminal" in err
    assert "answered-elsewhere" in tool_result(model_server)


@pytest.mark.shared_daemon
def test_nobody_answering_within_the_approval_timeout_denies(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo unanswered"), {"text": "ok"}]})
    result = cli(home, "run", "-w", str(workspace), "--approval-timeout", "0.2", "go")
    assert result.returncode == 0, result.stderr
    assert ANSWER_LINE.search(result.stderr)
    assert "nobody answered within 0.2 s" in tool_result(model_server)


@pytest.mark.shared_daemon
def test_an_attached_controller_keeps_the_approval_waiting_past_the_timeout(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo from-the-editor"), {"text": "ok"}]})
    with daemon.client("editor") as editor:
        session_id = create_session(editor)
        attach(editor, session_id)
        run = RunningCli(
            home, "-w", str(workspace), "-s", session_id, "--approval-timeout", "0.2", "go"
        )
        try:
            run.wait_for_line("another client is attached to the session; waiting for its answer")
            approval = wait_for_approval(editor, session_id)
            respond(editor, session_id, approval.id, "allow")
            code, _, err = run.finish()
        finally:
            run.close()
    assert code == 0, err
    assert "from-the-editor" in tool_result(model_server)


@pytest.mark.shared_daemon
def test_ctrl_c_in_run_without_a_terminal_cancels_without_asking(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo never"), {"text": "never"}]})
    run = RunningCli(home, "-w", str(workspace), "--approval-timeout", "60", "go")
    try:
        session_id = run.wait_for_line(ANSWER_LINE.pattern).group(1)
        run.proc.send_signal(signal.SIGINT)
        code, _, err = run.finish()
    finally:
        run.close()
    assert code == 3, err
    assert "interrupted: cancelling turn" in err
    assert "Ctrl-C again" not in err
    with daemon.client() as client:
        assert read_snapshot(client, session_id).turns[-1].status == "cancelled"


# --- tether approvals, approve and deny without a session ------------------------------------


@pytest.mark.shared_daemon
def test_approvals_lists_every_pending_approval_of_the_workspace(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo first")], "loop": True})
    first = waiting_session(daemon)
    model_server.set_script({"steps": [command_step("echo second")], "loop": True})
    second = waiting_session(daemon)

    listed = cli(home, "approvals", "-w", str(workspace))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    for line, (session_id, approval) in zip(lines, (first, second), strict=True):
        assert line.startswith(f"{session_id}  {approval.id}  run_command")
        assert line.endswith(f"  {approval.command}")
        assert re.search(r"  \d+ s  ", line)

    as_json = cli(home, "approvals", "-w", str(workspace), "--json")
    assert as_json.returncode == 0, as_json.stderr
    decoded = msgspec.json.decode(as_json.stdout, type=list[PendingApproval])
    assert [(p.session_id, p.approval.id) for p in decoded] == [
        (first[0], first[1].id),
        (second[0], second[1].id),
    ]


@pytest.mark.shared_daemon
def test_approve_without_a_session_answers_the_only_pending_approval(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo the-only-one"), {"text": "ok"}]})
    session_id, _ = waiting_session(daemon)
    with daemon.client() as client:
        create_session(client)  # the latest session now, with nothing pending
        denied = cli(home, "deny", "-w", str(workspace), "-m", "not today")
        assert denied.returncode == 0, denied.stderr
        assert "denied run_command: echo the-only-one" in denied.stdout
        assert not read_snapshot(client, session_id).pending_approvals
    model_server.wait_for_requests(2)
    assert "not today" in tool_result(model_server)


@pytest.mark.shared_daemon
def test_approve_without_a_session_and_several_pending_fails_listing_them_without_a_terminal(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo one")], "loop": True})
    first = waiting_session(daemon)
    second = waiting_session(daemon)
    result = cli(home, "approve", "-w", str(workspace))
    assert result.returncode == 2
    assert "2 approvals are pending in the workspace; name one" in result.stderr
    for session_id, approval in (first, second):
        assert f"{session_id}  {approval.id}" in result.stderr
    with daemon.client() as client:
        for session_id, _ in (first, second):
            assert read_snapshot(client, session_id).pending_approvals


@pytest.mark.shared_daemon
def test_approve_without_a_session_asks_which_on_a_terminal(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo one")], "loop": True})
    first = waiting_session(daemon)
    second = waiting_session(daemon)
    with TerminalCli(home, "approve", "-w", str(workspace)) as cli:
        shown = cli.expect("which one to approve? [1-2] (Enter = none): ")
        assert f" 1) {first[0]}  {first[1].id}" in shown
        assert f" 2) {second[0]}  {second[1].id}" in shown
        cli.send("3\n")
        cli.expect("is not a number from 1 to 2")
        cli.send("2\n")
        cli.expect("allowed run_command: echo one")
        assert cli.wait() == 0
    with daemon.client() as client:
        assert [a.id for a in read_snapshot(client, first[0]).pending_approvals] == [first[1].id]
        assert second[1].id not in {
            a.id for a in read_snapshot(client, second[0]).pending_approvals
        }


@pytest.mark.shared_daemon
def test_approve_always_refuses_an_approval_without_a_rule(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [command_step("echo hidden\x07"), {"text": "ok"}]})
    session_id, approval = waiting_session(daemon)
    assert approval.always_rule == ""
    result = cli(home, "approve", "-w", str(workspace), "--always")
    assert result.returncode == 2
    assert "offers no rule to allow always" in result.stderr
    with daemon.client() as client:
        assert read_snapshot(client, session_id).pending_approvals


class AnsweredPrompt:
    """An `AnswerPrompt` that records what it is asked; nothing is ever answered on it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.withdrawn: list[str] = []

    def ask(self, prompt: str) -> None:
        self.asked.append(prompt)

    def withdraw(self, note: str) -> None:
        self.withdrawn.append(note)

    def answer(self) -> str | None:
        return None


def two_commands_asking() -> tuple[ApprovalRequest, ApprovalRequest]:
    """Two approval requests of one turn, `echo 1` and `echo 2`, the first asked first."""
    first, second = (
        ApprovalRequest(
            id=f"a_{n}",
            turn_id="t_1",
            item_id=f"c_{n}",
            tool="run_command",
            arguments="{}",
            kind="command",
            reason="commands ask first",
            command=f"echo {n}",
            requested_at=float(n),
        )
        for n in (1, 2)
    )
    return first, second


@pytest.mark.shared_daemon
def test_the_answerer_describes_approvals_through_the_writer_it_is_given(
    daemon: DaemonProcess, capfd: pytest.CaptureFixture[str]
) -> None:
    first, second = two_commands_asking()
    said: list[str] = []
    prompt = AnsweredPrompt()
    with daemon.client() as client:
        answerer = ApprovalAnswerer(client, "s_1", interactive=True, prompt=prompt, say=said.append)
        answerer.requested(first, describe=True)  # pending when the client attached
        answerer.requested(second)  # described by the renderer; waits behind the first
        assert said == [describe_approval(first).rstrip("\n")]
        assert len(prompt.asked) == 1
        answerer.resolved(first.id, "vscode")  # the second is asked, described again
    assert said == [describe_approval(first).rstrip("\n"), describe_approval(second).rstrip("\n")]
    assert prompt.withdrawn == ["(answered by vscode)"]
    assert len(prompt.asked) == 2
    assert capfd.readouterr().err == ""


@pytest.mark.shared_daemon
def test_the_bell_rings_once_for_each_approval_that_waits_for_a_person(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    first, second = two_commands_asking()
    rung: list[str] = []
    with daemon.client() as client:
        asking = ApprovalAnswerer(
            client,
            "s_1",
            interactive=True,
            prompt=AnsweredPrompt(),
            say=lambda _: None,
            bell=lambda: rung.append("asked"),
        )
        asking.requested(first)
        asking.requested(second)  # waits behind the first: it rings when it comes
        asking.requested(first)  # the same request again (a re-attach): no second ring
        assert rung == ["asked", "asked"]
    model_server.set_script({"steps": [command_step("echo nobody"), {"text": "ok"}]})
    session_id, approval = waiting_session(daemon)
    with daemon.client() as client:
        waiting = ApprovalAnswerer(
            client,
            session_id,
            interactive=False,
            wait_seconds=60,
            say=lambda _: None,
            bell=lambda: rung.append("left for another client"),
        )
        waiting.requested(approval)
        denying = ApprovalAnswerer(
            client,
            session_id,
            interactive=False,
            say=lambda _: None,
            bell=lambda: rung.append("denied at once"),
        )
        denying.requested(approval)  # nobody could answer it here: denied, no bell
        assert approval.id in denying.answered
    assert rung == ["asked", "asked", "left for another client"]
