"""`tether` (interactive mode) on a real pseudo-terminal, against the real daemon and the
scripted model server: answers, approvals, Esc, messages typed during a turn, detaching, /model
and completion, /mcp, /hooks and /trust."""

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.screen import CTRL_C, CTRL_D, ENTER, ESC, TAB, Terminal
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    command_step,
    create_session,
    read_events,
    read_snapshot,
    start_daemon,
    start_turn,
    wait_until,
)
from tests.unit.test_mcp_pool import TINY
from tether.protocol.events import ApprovalRequested
from tether.protocol.methods import (
    DAEMON_STATUS,
    PROCESS_LIST,
    PROCESS_OUTPUT,
    SESSION_LIST,
    ProcessOutputParams,
)
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

READY = "/help for commands"
"""The banner, printed just before the prompt starts."""
STATUS = " · context "
"""Part of the status line: drawn once the prompt reads keys (sent earlier, the terminal
would still turn Enter into a newline)."""

RUNNING = "run_command(command='while"
"""The line above the prompt while `WAIT_FOR_GO` runs (the call is printed when it ends)."""

WAIT_FOR_GO = command_step("while [ ! -e go ]; do sleep 0.02; done; echo went")
"""A command that runs until the test creates `go` in the workspace."""


@pytest.fixture
def terminals(home: Home, workspace: Path) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()
    (workspace / "go").unlink(missing_ok=True)


def open_chat(home: Home, workspace: Path, terminals: list[Terminal], *args: str) -> Terminal:
    argv = [sys.executable, "-P", "-m", "tether.clients.cli.main", *args, "-w", str(workspace)]
    terminal = Terminal(argv, env=home.env)
    terminals.append(terminal)
    terminal.expect(READY)
    terminal.expect(STATUS)
    return terminal


def last_turn_status(daemon: DaemonProcess, session_id: str) -> str:
    with daemon.client() as client:
        return read_snapshot(client, session_id).turns[-1].status


def running_session(daemon: DaemonProcess) -> str:
    """The one session of the daemon that runs a turn."""
    with daemon.client() as client:
        [session] = [s for s in client.call(SESSION_LIST).sessions if s.status == "running"]
    return session.id


def test_tether_alone_answers_and_shows_the_status_line(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    usage = {"prompt_tokens": 1234, "completion_tokens": 56}
    model_server.set_script({"steps": [{"text": "The answer is 42.", "chunks": 4, "usage": usage}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send(f"what is it?{ENTER}")
    terminal.expect("» what is it?")
    terminal.expect("The answer is 42.")
    terminal.expect("1 model call")  # the turn's summary, an item shown before the turn ends
    # The status line counts the turn's tokens once the turn's end has come: leaving after
    # that leaves an idle session (before it, the turn would still be running).
    terminal.expect("mode edits")
    terminal.expect("1.2k in / 56 out")
    assert "context" in terminal.text
    terminal.send(CTRL_D)
    assert terminal.wait() == 0
    assert "tether chat -s s_" in terminal.text


def test_a_failing_command_an_edit_and_markdown_reach_the_scrollback_rendered(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    fail = {"command": "echo boom; exit 3", "description": "fail"}
    write = {"path": "chat-shown.txt", "content": "hello\n"}
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "run_command", "arguments": fail}]},
                {"tool_calls": [{"name": "write_file", "arguments": write}]},
                {"text": "The **answer** is ready.\n\n- one\n- two", "chunks": 5},
            ]
        }
    )
    terminal = open_chat(home, workspace, terminals, "chat", "--permission-mode", "auto")
    terminal.send(f"go{ENTER}")
    terminal.expect("✗ run_command(command='echo boom; exit 3', description='fail') exit 3")
    terminal.expect("  │ boom")
    terminal.expect("✓ write_file(path='chat-shown.txt'")
    terminal.expect("+hello")
    terminal.expect("answer is ready.")
    terminal.expect("3 model calls")
    raw = terminal.raw
    assert "\x1b[1;31m✗ \x1b[0m" in raw  # the mark, in red
    assert "\x1b[32m+hello\x1b[0m" in raw  # the diff, coloured
    assert "\x1b[1manswer\x1b[0m is ready." in raw  # Markdown, rendered
    assert "**answer**" not in raw
    assert "• one" in terminal.text  # the list too
    assert (workspace / "chat-shown.txt").read_text() == "hello\n"


@pytest.mark.parametrize(
    ("key", "answer", "result"),
    [("y", "allowed", "approved-run"), (ENTER, "denied: denied at", "denied at the terminal")],
    ids=["y", "enter-is-the-default-no"],
)
def test_an_approval_is_asked_inline_and_answered_with_one_key(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
    key: str,
    answer: str,
    result: str,
) -> None:
    model_server.set_script({"steps": [command_step("echo approved-run"), {"text": "done"}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send(f"run it{ENTER}")
    terminal.expect("approval needed")
    terminal.expect("allow? [y]es / [a]lways run_command(")
    terminal.expect("(Enter = no)")
    terminal.send(key)
    terminal.expect(answer)
    terminal.expect("done")
    assert result in model_server.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("quiet", [False, True])
def test_an_approval_rings_the_bell_unless_quiet(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
    quiet: bool,
) -> None:
    model_server.set_script({"steps": [command_step("echo rung"), {"text": "done"}]})
    terminal = open_chat(home, workspace, terminals, "chat", *(["--quiet"] if quiet else []))
    assert "\a" not in terminal.raw
    terminal.send(f"run it{ENTER}")
    terminal.expect("(Enter = no)")
    assert terminal.raw.count("\a") == (0 if quiet else 1)
    terminal.send("y")
    terminal.expect("done")
    assert terminal.raw.count("\a") == (0 if quiet else 1)


def test_a_pending_approval_is_asked_at_once_on_attach(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    model_server.set_script({"steps": [command_step("echo never-run"), {"text": "refused"}]})
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "run it")
        read_events(
            client, session_id, lambda es: any(isinstance(e.event, ApprovalRequested) for e in es)
        )
    terminal = open_chat(home, workspace, terminals, "chat", "--session", session_id)
    terminal.expect("allow? [y]es / [a]lways run_command(", anywhere=True)
    assert "approval needed" in terminal.text
    terminal.send("n")
    terminal.expect("refused")
    assert "denied at the terminal" in model_server.requests[1]["messages"][-1]["content"]


def waiting_turn(
    home: Home,
    workspace: Path,
    terminals: list[Terminal],
    model_server: ModelServer,
    message: str,
    then: dict[str, object],
) -> Terminal:
    """`tether chat` in mode auto, its turn on `message` running until `go` appears in the
    workspace (the model's next step is `then`)."""
    model_server.set_script({"steps": [WAIT_FOR_GO, then]})
    terminal = open_chat(home, workspace, terminals, "chat", "--permission-mode", "auto")
    terminal.send(f"{message}{ENTER}")
    terminal.expect(RUNNING)
    return terminal


def test_esc_cancels_the_running_turn(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    terminal = waiting_turn(home, workspace, terminals, model_server, "wait", {"text": "never"})
    session_id = running_session(daemon)
    terminal.send(ESC)
    terminal.expect("cancelling the turn")
    terminal.expect("cancelled in")  # the turn's end, said after
    wait_until(lambda: last_turn_status(daemon, session_id) == "cancelled", "turn cancelled")
    assert len(model_server.requests) == 1


def test_a_message_typed_during_a_turn_joins_its_next_step(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    terminal = waiting_turn(
        home, workspace, terminals, model_server, "first", {"text": "both done"}
    )
    terminal.send(f"and also this{ENTER}")
    terminal.expect("joins at the next step")
    (workspace / "go").touch()
    terminal.expect("both done")
    second = model_server.wait_for_requests(2)[1]
    users = [m["content"] for m in second["messages"] if m["role"] == "user"]
    assert any("and also this" in str(content) for content in users)


def test_ctrl_d_detaches_and_the_turn_completes_in_the_daemon(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    terminal = waiting_turn(
        home, workspace, terminals, model_server, "go on without me", {"text": "finished alone"}
    )
    session_id = running_session(daemon)
    terminal.send(CTRL_D)
    assert terminal.wait() == 0
    assert "the turn keeps running in the daemon" in terminal.text
    assert last_turn_status(daemon, session_id) == "running"
    (workspace / "go").touch()
    wait_until(lambda: last_turn_status(daemon, session_id) == "completed", "turn completed")
    assert len(model_server.wait_for_requests(2)) == 2


def test_slash_model_switches_the_model_the_next_request_names(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    model_server.set_script({"steps": [{"text": "switched"}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send(f"/model other-model{ENTER}")
    terminal.expect("model: other-model")
    terminal.send(f"hello{ENTER}")
    terminal.expect("switched")
    assert model_server.wait_for_requests(1)[0]["model"] == "other-model"


def test_slash_commands_complete(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    terminals: list[Terminal],
) -> None:
    terminal = open_chat(home, workspace, terminals)
    terminal.send("/hel")
    terminal.expect("this list")  # the completion menu, offering /help
    terminal.send(TAB)
    terminal.send(ENTER)
    terminal.expect("/processes")  # the help it printed
    terminal.expect("Ctrl-D leaves")


def test_tab_takes_a_unique_path_and_the_first_enter_sends(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    (workspace / "unique_notes_file.txt").write_text("notes\n")
    model_server.set_script({"steps": [{"text": "read it"}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send("look at @unique_notes_f")
    terminal.expect("unique_notes_file.txt")  # the menu, with its one entry
    terminal.send(TAB)
    terminal.send(ENTER)
    terminal.expect("» look at @unique_notes_file.txt")
    terminal.expect("read it")
    assert "unique_notes_file.txt" in str(model_server.wait_for_requests(1)[0]["messages"])


def test_alt_enter_adds_a_line_and_ctrl_c_twice_leaves(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    model_server.set_script({"steps": [{"text": "two lines read"}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send(f"line one{ESC}{ENTER}line two{ENTER}")
    terminal.expect("two lines read")
    users = [m for m in model_server.requests[0]["messages"] if m["role"] == "user"]
    assert "line one\nline two" in str(users[-1]["content"])
    # The hint's window opens when it is drawn (tests/unit/test_cli_interactive.py), so a
    # busy machine cannot hide it; the second press leaves, and the draft was never sent.
    terminal.send(f"a draft{CTRL_C}")
    terminal.expect("Ctrl-C again to leave")
    terminal.send(CTRL_C)
    assert terminal.wait() == 0
    assert len(model_server.requests) == 1


def test_chat_without_a_terminal_says_how_to_run_instead(home: Home, workspace: Path) -> None:
    done = cli(home, "chat", "-w", str(workspace))
    assert done.returncode == 2
    assert "needs a terminal" in done.stderr
    assert "tether run" in done.stderr


def test_slash_processes_shows_each_process_with_its_latest_output(
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    serve = {
        "name": "run_command",
        "arguments": {
            "command": "echo first; echo serving on 8123; exec sleep 300",
            "description": "serve",
            "background": True,
        },
    }
    model_server.set_script({"steps": [{"tool_calls": [serve]}, {"text": "started it"}]})
    # A daemon of its own: the process it leaves would show in other tests' /processes.
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        _serve_and_list(daemon, home, workspace, terminals)
    finally:
        daemon.stop()


def _serve_and_list(
    daemon: DaemonProcess, home: Home, workspace: Path, terminals: list[Terminal]
) -> None:
    terminal = open_chat(home, workspace, terminals, "chat", "--permission-mode", "auto")
    terminal.send(f"start the server{ENTER}")
    terminal.expect("started it")
    with daemon.client() as client:
        wait_until(
            lambda: (
                "serving"
                in client.call(
                    PROCESS_OUTPUT,
                    ProcessOutputParams(process_id=client.call(PROCESS_LIST).processes[0].id),
                ).text
            ),
            "the server's output",
        )
    terminal.send(f"/processes{ENTER}")
    terminal.expect("│ serving on 8123")


def test_slash_commands_answer_from_the_daemon(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    terminals: list[Terminal],
) -> None:
    terminal = open_chat(home, workspace, terminals)
    for typed, shown in (
        ("/processes", "no background processes"),
        ("/skills", "no skills (looked in "),
        ("/todos", "no todos"),
        ("/mode auto", "permission mode: auto"),
        ("/context", "context: "),
        ("/attach s_nothing_like_it", "no session matches 's_nothing_like_it'"),
        ("/frobnicate", "no command /frobnicate; /help lists them"),
    ):
        terminal.send(f"{typed}{ENTER}")
        terminal.expect(shown)
    with daemon.client() as client:
        [mine] = [s for s in client.call(SESSION_LIST).sessions if s.clients == 1]
    assert mine.permission_mode == "auto"
    terminal.send(f"/sessions{ENTER}")
    terminal.expect("choose a session")
    terminal.expect("(this one)")
    terminal.send(ESC)
    terminal.send(f"/todos{ENTER}")
    terminal.expect("no todos")


def test_slash_mcp_and_slash_hooks_show_what_tether_mcp_and_tether_hooks_show(
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
) -> None:
    config = home.root / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[permissions]\nallow = ["mcp__tiny__*"]\n'
        f"[mcpServers.tiny]\ncommand = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(TINY))}, "--modern"]\n'
        '[[hooks]]\nevent = "turn_end"\nname = "marker"\ncommand = "true"\n'
    )
    call = {"name": "mcp__tiny__echo", "arguments": {"text": "hi"}}
    model_server.set_script({"steps": [{"tool_calls": [call]}, {"text": "echoed it"}]})
    # A daemon of its own: the others' config has no servers or hooks.
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        terminal = open_chat(home, workspace, terminals)
        terminal.send(f"/mcp{ENTER}")
        terminal.expect("tiny  idle  stdio  ")  # lazily: nothing ran yet
        terminal.send(f"echo hi{ENTER}")
        terminal.expect("echoed it")
        terminal.send(f"/mcp{ENTER}")
        terminal.expect("tiny  running  stdio (MCP 2026-07-28)  ")
        terminal.expect("tools: echo, add (read-only), look (read-only), fail")
        terminal.send(f"/hooks{ENTER}")
        terminal.expect("turn_end      marker: true  (timeout ")
    finally:
        daemon.stop()


def test_slash_trust_trusts_the_workspace_and_revokes_it(
    home: Home, workspace: Path, terminals: list[Terminal]
) -> None:
    # A daemon of its own: trusting the shared one's workspace would change the others' tests.
    daemon = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        terminal = open_chat(home, workspace, terminals)
        terminal.send(f"/trust status{ENTER}")
        terminal.expect("workspace not trusted: ")
        terminal.send(f"/trust{ENTER}")
        terminal.expect("workspace trusted (by ")
        with daemon.client() as client:
            trusted = client.call(DAEMON_STATUS).workspace_trusted
        terminal.send(f"/trust revoke{ENTER}")
        terminal.expect("workspace not trusted (by ")
        with daemon.client() as client:
            revoked = client.call(DAEMON_STATUS).workspace_trusted
    finally:
        daemon.stop()
    assert trusted
    assert not revoked


def test_slash_image_sends_an_image_file_with_the_next_message(
    daemon: DaemonProcess,
    home: Home,
    workspace: Path,
    model_server: ModelServer,
    terminals: list[Terminal],
    tmp_path: Path,
) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(base64.b64decode(PNG_2X1))
    (tmp_path / "notes.png").write_text("words\n")
    model_server.set_script({"steps": [{"text": "two pixels"}]})
    terminal = open_chat(home, workspace, terminals)
    terminal.send(f"/image {tmp_path / 'notes.png'}{ENTER}")
    terminal.expect("notes.png: not a PNG, JPEG, GIF or WebP image")
    terminal.send(f"/model gpt-4o{ENTER}")
    terminal.expect("model: gpt-4o")
    terminal.send(f"/image {shot}{ENTER}")
    terminal.expect("with your next message: shot.png (")
    terminal.send(f"what is it?{ENTER}")
    terminal.expect("[image shot.png 2\N{MULTIPLICATION SIGN}1, ")
    terminal.expect("two pixels")
    (request,) = model_server.wait_for_requests(1)
    url = request["messages"][-1]["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + PNG_2X1


PNG_2X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAAEElEQVR4nGP4z8DAwMDAAAAGAQH/"
    "u+fJ7QAAAABJRU5ErkJggg=="
)
"""A PNG of 2x1 pixels."""
