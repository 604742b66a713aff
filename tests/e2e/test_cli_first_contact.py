"""What a new user meets first: `--version`, the prompt on stdin, piped context, continuing
the latest session, and commands that start the daemon themselves and say plainly when there
is nothing for them to act on."""

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support import DaemonProcess, Home, alive, cli, run_cli, wait_until
from tether.protocol.session import SessionInfo
from tether.protocol.version import __version__
from tether.testing import ModelServer

EXIT_USAGE = 2


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of every user message of a chat-completions request body."""
    texts: list[str] = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append("".join(part.get("text", "") for part in content))
    return texts


def test_version_names_the_release(tmp_path: Path) -> None:
    result = run_cli(Home(tmp_path / "user"), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"tether {__version__}\n"


@pytest.mark.shared_daemon
def test_the_prompt_is_read_from_stdin_without_a_prompt_argument(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "answered from stdin"}]})
    result = cli(home, "run", "-w", str(workspace), stdin="what does app.py do?\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "answered from stdin"
    assert user_texts(model_server.requests[0])[-1].endswith("what does app.py do?")


@pytest.mark.shared_daemon
def test_piped_text_reaches_the_model_as_context_of_the_prompt(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    log = "step 1 ok\nstep 2 FAILED: ImportError: no module named 'greeter'\n"
    result = cli(home, "run", "-w", str(workspace), "why does this fail?", stdin=log)
    assert result.returncode == 0, result.stderr
    sent = user_texts(model_server.requests[0])[-1]
    assert f'<attachment name="stdin" characters="{len(log)}">\n{log}\n</attachment>' in sent
    assert sent.endswith("why does this fail?")


@pytest.mark.shared_daemon
def test_a_long_pipe_is_cut_within_the_attachment_budget(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    # 3 MB of log lines: the CLI keeps head and tail, the daemon cuts to its budget; the
    # last line, where the error is, still reaches the model.
    lines = [f"line {i:07d} fine" for i in range(150_000)] + ["FATAL: disk full"]
    result = cli(home, "run", "-w", str(workspace), "what broke?", stdin="\n".join(lines))
    assert result.returncode == 0, result.stderr
    sent = user_texts(model_server.requests[0])[-1]
    attachment = re.search(r'<attachment name="stdin" characters="(\d+)" truncated="true">', sent)
    assert attachment is not None, sent[:300]
    assert len(sent) < 45_000
    assert "line 0000000 fine" in sent
    assert "FATAL: disk full" in sent


@pytest.mark.shared_daemon
def test_binary_stdin_is_refused_before_anything_is_sent(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    result = cli(home, "run", "-w", str(workspace), "what is this?", stdin=b"\x7fELF\0\0\1")
    assert result.returncode == EXIT_USAGE
    assert "binary" in result.stderr
    assert model_server.requests == []


def test_run_continue_joins_the_latest_session(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "one"}, {"text": "two"}, {"text": "three"}]})
    assert cli(home, "run", "-w", str(workspace), "first").returncode == 0
    assert cli(home, "run", "-w", str(workspace), "second").returncode == 0
    result = cli(home, "run", "-w", str(workspace), "-c", "and then?")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "three"
    # The third request continues the second session: its history, not the first's.
    assert user_texts(model_server.requests[2])[-2:] == ["second", "and then?"]
    listed = cli(home, "sessions", "-w", str(workspace))
    assert len(listed.stdout.splitlines()) == 2
    assert "2 turns" in listed.stdout.splitlines()[0]
    cli(home, "daemon", "stop", "-w", str(workspace))


def test_run_continue_without_a_session_says_so(home: Home, workspace: Path) -> None:
    result = cli(home, "run", "-w", str(workspace), "--continue", "go on")
    cli(home, "daemon", "stop", "-w", str(workspace))
    assert result.returncode == EXIT_USAGE
    assert "no sessions yet" in result.stderr


def test_run_without_any_prompt_explains_how_to_give_one(home: Home, workspace: Path) -> None:
    result = cli(home, "run", "-w", str(workspace))  # stdin is /dev/null
    assert result.returncode == EXIT_USAGE
    assert "give the prompt" in result.stderr
    assert home.read_discovery(workspace) is None  # nothing could be asked: no daemon started
    blank = cli(home, "run", "-w", str(workspace), stdin="   \n")
    # A pipe may hold a prompt, so the CLI started a daemon before reading it: stop that one.
    wait_until(lambda: home.read_discovery(workspace) is not None, "the early daemon")
    cli(home, "daemon", "stop", "-w", str(workspace))
    assert blank.returncode == EXIT_USAGE
    assert "give the prompt" in blank.stderr


@pytest.mark.parametrize(
    ("command", "code", "says"),
    [
        (["cancel"], EXIT_USAGE, "no sessions yet"),
        (["approve"], EXIT_USAGE, "no pending approval in the workspace"),
        (["deny"], EXIT_USAGE, "no pending approval in the workspace"),
        (["undo"], EXIT_USAGE, "no sessions yet"),
        (["compact"], EXIT_USAGE, "no sessions yet"),
        (["processes"], 0, "no background processes"),
        (["processes", "--kill", "p_none"], EXIT_USAGE, "no background process 'p_none'"),
    ],
)
def test_every_command_starts_the_daemon_it_needs(
    home: Home, workspace: Path, command: list[str], code: int, says: str
) -> None:
    assert home.read_discovery(workspace) is None
    result = cli(home, *command, "-w", str(workspace))
    info = home.read_discovery(workspace)
    cli(home, "daemon", "stop", "-w", str(workspace))
    assert result.returncode == code, result.stderr
    assert says in result.stdout + result.stderr
    assert "no daemon" not in result.stderr
    assert info is not None, "the command did not start the daemon"
    wait_until(lambda: not alive(info.pid), "the daemon stopped")


@pytest.mark.shared_daemon
def test_with_nothing_to_act_on_a_command_says_so_and_exits_2(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "done"}]})
    run = cli(home, "run", "-w", str(workspace), "--detach", "hello")
    session_id = run.stdout.strip()
    # Attaching follows the running turn to its end.
    assert cli(home, "attach", session_id, "-w", str(workspace)).returncode == 0
    for command, says in (
        (["cancel", session_id], f"session {session_id} has no running turn"),
        (["approve", session_id], f"no pending approval in session {session_id}"),
        (["deny", session_id, "a_x"], "matching 'a_x'"),
        (["undo", session_id], f"no turn of {session_id} changed files"),
        (["undo", session_id, "--turn", "t_nope"], f"session {session_id} has no turn 't_nope'"),
        (["attach", "s_no_such"], "no session matches 's_no_such'"),
    ):
        result = cli(home, *command, "-w", str(workspace))
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        assert says in result.stderr, (command, result.stderr)


def test_a_daemon_started_early_is_the_one_locate_connects_to(home: Home, workspace: Path) -> None:
    from tether.clients.core import discovery

    with home.activated():
        discovery.start_early(workspace)
        discovery.start_early(workspace)  # already starting: nothing more is spawned
        located = discovery.locate(workspace)
        try:
            assert located.started
            assert discovery.locate(workspace, autostart=False).info == located.info
        finally:
            cli(home, "daemon", "stop", "-w", str(workspace))
    # No second daemon lost a race for the lock (it would have said so on its stderr).
    assert "another daemon already serves" not in home.stderr_path(workspace).read_text()


def test_the_home_folder_found_as_workspace_is_said_once_with_what_to_do(home: Home) -> None:
    folder = Path(home.env["HOME"]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    first = run_cli(home, "sessions", cwd=folder)
    try:
        assert first.returncode == 0, first.stderr
        assert f"the workspace is {folder}, your home folder" in first.stderr
        assert "Start tether in your project's folder, or give -w PROJECT." in first.stderr
        again = run_cli(home, "sessions", cwd=folder)  # its daemon runs now
        assert again.returncode == 0, again.stderr
        assert "home folder" not in again.stderr
        given = run_cli(home, "sessions", "-w", str(folder))  # chosen, not found
        assert "home folder" not in given.stderr
    finally:
        info = home.read_discovery(folder)
        cli(home, "daemon", "stop", "-w", str(folder))
    assert info is not None
    wait_until(lambda: not alive(info.pid), "the daemon stopped")


def test_a_broken_config_says_what_to_fix_and_keeps_no_session(home: Home, workspace: Path) -> None:
    assert run_cli(home, "sessions", "-w", str(workspace)).returncode == 0  # its daemon runs
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[provider\n")  # broken while it runs: its turns fail until fixed
    try:
        done = run_cli(home, "run", "-w", str(workspace), "hello")
        assert done.returncode != 0
        assert "fix the config file as said above (`tether doctor` checks it)" in done.stderr
        assert "no session was kept" in done.stderr
        assert "continue`" not in done.stderr  # going on cannot help until it is fixed
        listed = run_cli(home, "sessions", "-w", str(workspace))
        assert listed.stdout == "no sessions yet\n", listed.stdout
    finally:
        info = home.read_discovery(workspace)
        cli(home, "daemon", "stop", "-w", str(workspace))
    assert info is not None
    wait_until(lambda: not alive(info.pid), "the daemon stopped")


def test_attaching_to_a_turn_failed_by_the_config_says_to_fix_it_not_to_go_on(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "hello back"}]})
    config = Path(home.env["XDG_CONFIG_HOME"]) / "tether" / "config.toml"
    try:
        first = cli(home, "run", "-w", str(workspace), "hello")
        assert first.returncode == 0, first.stderr
        listed = cli(home, "sessions", "--json", "-w", str(workspace)).stdout
        [session] = [s.id for s in msgspec.json.decode(listed, type=list[SessionInfo])]
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("[provider\n")
        failed = cli(home, "run", "-s", session, "-w", str(workspace), "again")
        assert failed.returncode != 0
        attached = cli(home, "attach", session, "-w", str(workspace))
        assert attached.returncode == failed.returncode
        assert "continue`" not in attached.stderr  # going on cannot help until it is fixed
        assert (
            f"the last turn of session {session} failed; the model was not asked: fix the config"
            " file as said above (`tether doctor` checks it), then send the prompt again:"
            f" `tether run -s {session} '…'`"
        ) in attached.stderr
        # Above: what is wrong, and where.
        assert f"Your tether settings are invalid: {config}, line 1" in attached.stderr
    finally:
        cli(home, "daemon", "stop", "-w", str(workspace))


def test_a_search_for_nothing_is_a_usage_error_and_starts_no_daemon(
    home: Home, workspace: Path
) -> None:
    done = cli(home, "sessions", "--search", "  ", "-w", str(workspace))
    assert (done.returncode, done.stderr) == (2, "tether: --search needs some text to look for\n")
    # A daemon started for the command would have had its stderr file made before it ran.
    assert not home.stderr_path(workspace).exists()
    assert home.read_discovery(workspace) is None
