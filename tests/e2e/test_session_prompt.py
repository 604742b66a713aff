"""The system prompt is built for each session when the daemon creates or loads it, against
the real daemon: a session created later sees the workspace as it is then, and a session's
prompt never changes under it (providers cache the prompt prefix)."""

from pathlib import Path

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    create_session,
    start_daemon,
    start_turn,
)
from tether.clients.core.rpc import Client
from tether.testing import ModelServer


def system_prompt_of_a_turn(client: Client, session_id: str, server: ModelServer) -> str:
    attach(client, session_id)
    start_turn(client, session_id, "hello")
    collect_until_turn_end(client, session_id)
    first = server.requests[-1]["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def test_each_session_sees_the_branch_checked_out_when_it_was_created(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    (workspace / ".git").mkdir()
    head = workspace / ".git" / "HEAD"
    head.write_text("ref: refs/heads/main\n")
    model_server.set_script({"steps": [{"text": "ok"}] * 4})
    with daemon.client() as client:
        first = create_session(client)
        on_main = system_prompt_of_a_turn(client, first, model_server)
        assert "- Git branch: main\n" in on_main

        head.write_text("ref: refs/heads/feature/login\n")
        (workspace / "NEW.md").write_text("new\n")
        second = create_session(client)
        on_feature = system_prompt_of_a_turn(client, second, model_server)
        assert "- Git branch: feature/login\n" in on_feature
        assert "NEW.md" in on_feature
        # The first session keeps the prompt it started with, byte for byte.
        assert system_prompt_of_a_turn(client, first, model_server) == on_main
    daemon.stop()

    # A session loaded by a later daemon is described as the workspace is then.
    head.write_text("ref: refs/heads/release\n")
    restarted = start_daemon(home, workspace, "--idle-timeout", "0")
    try:
        model_server.set_script({"steps": [{"text": "ok"}]})
        with restarted.client() as client:
            loaded = system_prompt_of_a_turn(client, first, model_server)
        assert "- Git branch: release\n" in loaded
    finally:
        assert restarted.stop() == 0
