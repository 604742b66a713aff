"""Settings that take effect while the daemon runs, in-process: `UserSettings` over a real
config file, the `ModelPool` of real OpenAI clients against the scripted model server, and the
JSON-RPC handlers over real `Sessions` (the rig of `test_handlers`). What only a subprocess
proves (the CLI's own environment reaching a running daemon) is in tests/e2e/test_settings.py."""

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.inprocess import running_sessions
from tests.unit.test_handlers import PAUSE, DaemonParts, Rig, created
from tether.daemon.config.live import UserSettings
from tether.daemon.config.settings import ConfigError, ProviderConfig
from tether.daemon.procs.table import ProcessTable
from tether.daemon.providers.base import ModelRequest, ModelResponse, StreamCallbacks
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.models import ModelPool
from tether.daemon.sessions.store import Store
from tether.protocol.events import ApprovalRequested, TurnCompleted
from tether.protocol.methods import DaemonStatusResult, SessionListResult
from tether.testing import ModelServer

# --- UserSettings -------------------------------------------------------------------------------


def test_a_client_s_variables_replace_the_daemon_s_and_the_file_fills_in(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[provider]\nmodel = "file"\napi_key = "file-key"\n')
    daemon_env = {
        "TETHER_MODEL": "daemon",
        "OPENAI_API_KEY": "daemon-key",
        "TETHER_PERMISSION_MODE": "ask",
    }
    user = UserSettings(path, daemon_env)
    assert user.read(None).provider.model == "daemon"
    # A client that sent its variables: what it leaves unset is unset, the file applies.
    sent_none = user.read({})
    assert (sent_none.provider.model, sent_none.provider.api_key) == ("file", "file-key")
    sent = user.read({"TETHER_MODEL": "client", "TETHER_API_KEY": "client-key"})
    assert (sent.provider.model, sent.provider.api_key) == ("client", "client-key")
    # Only provider variables travel: the daemon's permission mode stays.
    assert user.read({"TETHER_PERMISSION_MODE": "auto"}).permissions.mode == "ask"
    assert user.sources({"TETHER_MODEL": "client"}) == {"model": "client", "base_url": "default"}
    assert user.sources(None) == {"model": "daemon", "base_url": "default"}
    assert user.sources({}) == {"model": "file", "base_url": "default"}


def test_an_edit_applies_at_the_next_read_and_a_broken_file_fails_until_fixed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[provider]\nmodel = "aaa"\n')
    user = UserSettings(path, {})
    assert user.read().provider.model == "aaa"
    # Same size, written at once: the bytes decide, not the modification time.
    path.write_text('[provider]\nmodel = "bbb"\n')
    assert user.read().provider.model == "bbb"
    path.write_text('[provider]\nmodel = "bbb"\nmax_steps = 3\n')
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"line 3: provider.max_steps: unknown setting"):
            user.read()
    path.write_text('max_steps = 3\n[provider]\nmodel = "ccc"\n')
    assert (user.read().provider.model, user.read().max_steps) == ("ccc", 3)
    path.unlink()
    assert user.read().provider.model == "qwen3-coder"


def test_settings_only_a_start_reads_are_reported_until_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("idle_timeout = 60\n")
    user = UserSettings(path, {})
    assert user.restart_needed(user.read()) == []
    path.write_text(
        'idle_timeout = 30\nmax_steps = 5\n[permissions]\nmode = "ask"\n'
        '[[lsp]]\nname = "rust"\ncommand = ["rust-analyzer"]\n'
    )
    # max_steps applies at the next turn: nothing to restart for.
    assert user.restart_needed(user.read()) == ["permissions.mode", "idle_timeout", "lsp"]
    assert user.started.idle_timeout == 60


# --- the pool of clients ------------------------------------------------------------------------


class Counted:
    """A real OpenAI client that counts its calls and notes when it is closed."""

    provider = "openai"

    def __init__(self, settings: ProviderConfig) -> None:
        self.settings = settings
        self.inner = OpenAIChatClient(
            base_url=settings.base_url,
            model=settings.model,
            api_key=settings.api_key,
            silence_timeout=settings.request_timeout,
        )
        self.model = settings.model
        self.calls = 0
        self.closed = False

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        self.calls += 1
        return await self.inner.complete(request, callbacks)

    async def list_models(self) -> list[str]:
        return await self.inner.list_models()

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


class Pooled:
    """A rig whose turns take their settings from a config file, with clients counted."""

    def __init__(self, rig: Rig, pool: ModelPool, made: list[Counted], config: Path) -> None:
        self.rig = rig
        self.pool = pool
        self.made = made
        self.config = config

    def write(self, provider: str, extra: str = "") -> None:
        url = self.rig.server.base_url
        self.config.write_text(f'{extra}[provider]\nbase_url = "{url}"\n{provider}')


@asynccontextmanager
async def pooled_rig(
    tmp_path: Path, store: Store, server: ModelServer, env: dict[str, str]
) -> AsyncGenerator[Pooled]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f'[provider]\nbase_url = "{server.base_url}"\nmodel = "configured"\n')
    made: list[Counted] = []

    def factory(settings: ProviderConfig) -> Counted:
        made.append(Counted(settings))
        return made[-1]

    pool = ModelPool(UserSettings(config, env), factory)
    processes = ProcessTable(record=tmp_path / "processes.json")
    try:
        with trio.fail_after(20):
            async with running_sessions(store, workspace, server, models=pool) as sessions:
                rig = Rig(DaemonParts(workspace, sessions, processes), server)
                try:
                    yield Pooled(rig, pool, made, config)
                finally:
                    rig.close()
    finally:
        await pool.aclose()


async def test_each_connection_s_variables_choose_its_turns_model_and_key(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "ok"}], "loop": True})
    async with pooled_rig(tmp_path, sqlite_store, model_server, {"TETHER_MODEL": "daemon"}) as p:
        # The shell's variables go with `initialize`, as the CLI sends them; the editor sends
        # none, so the daemon's own apply to it.
        shell = await p.rig.client("shell", providerEnv={"model": "mine", "apiKey": "sk-mine"})
        editor = await p.rig.client("editor")
        for client in (shell, editor):
            session_id = await created(client)
            await client.call("session/attach", sessionId=session_id)
            await client.call("turn/start", sessionId=session_id, text="hi")
            await client.next_event(lambda e: isinstance(e, TurnCompleted))
        assert [r["model"] for r in model_server.requests] == ["mine", "daemon"]
        keys = [h.get("authorization") for h in model_server.request_headers]
        assert keys == ["Bearer sk-mine", None]

        status = await shell.call("daemon/status")
        assert isinstance(status, DaemonStatusResult)
        assert (status.model, status.model_from, status.base_url_from) == (
            "mine",
            "client",
            "file",
        )
        assert status.config_file == str(p.config)
        assert "sk-mine" not in repr(status)
        status = await editor.call("daemon/status")
        assert isinstance(status, DaemonStatusResult)
        assert (status.model, status.model_from) == ("daemon", "daemon")


async def test_a_turn_keeps_its_client_when_settings_change_and_it_is_closed_after(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [PAUSE, {"text": "done"}, {"text": "other"}]})
    async with pooled_rig(tmp_path, sqlite_store, model_server, {}) as p:
        client = await p.rig.client()
        waiting = await created(client)
        await client.call("session/attach", sessionId=waiting)
        await client.call("turn/start", sessionId=waiting, text="run it")
        request = await client.next_event(lambda e: isinstance(e, ApprovalRequested))
        assert isinstance(request, ApprovalRequested)
        [old] = p.made

        # Another server setting now: the next turn gets a new client, the paused one keeps its.
        p.write('model = "configured"\nrequest_timeout = 99\n')
        other = await created(client)
        await client.call("session/attach", sessionId=other)
        await client.call("turn/start", sessionId=other, text="hello")
        await client.next_event(lambda e: isinstance(e, TurnCompleted))
        [_, new] = p.made
        assert (new.settings.request_timeout, new.calls, old.closed) == (99.0, 1, False)

        await client.call(
            "approval/respond", sessionId=waiting, approvalId=request.approval.id, decision="deny"
        )
        done = await client.next_event(lambda e: isinstance(e, TurnCompleted))
        assert isinstance(done, TurnCompleted)
        assert done.status == "completed"
        assert (old.calls, old.closed, new.closed) == (2, True, False)
        assert p.pool.open_count == 1


async def test_a_broken_config_fails_the_turn_saying_where_and_the_fix_applies_next(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "ok"}], "loop": True})
    async with pooled_rig(tmp_path, sqlite_store, model_server, {}) as p:
        client = await p.rig.client()
        session_id = await created(client)
        await client.call("session/attach", sessionId=session_id)
        p.config.write_text("[provider\n")
        await client.call("turn/start", sessionId=session_id, text="hi")
        done = await client.next_event(lambda e: isinstance(e, TurnCompleted))
        assert isinstance(done, TurnCompleted)
        assert done.status == "failed"
        assert done.error is not None
        assert done.error.code == "config_invalid"
        assert f"{p.config}, line 1, column 10" in done.error.message
        assert model_server.requests == []
        status = await client.call("daemon/status")
        assert isinstance(status, DaemonStatusResult)
        assert f"{p.config}, line 1" in status.config_error
        listed = await client.call("session/list")
        assert isinstance(listed, SessionListResult)
        assert [s.state for s in listed.sessions] == ["failed"]

        p.write('model = "fixed"\n')
        await client.call("turn/start", sessionId=session_id, text="again")
        await client.next_event(lambda e: isinstance(e, TurnCompleted))
        assert [r["model"] for r in model_server.requests] == ["fixed"]


async def test_compaction_asks_the_model_the_session_chose(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    summary = "## User requests\n- look into the greeting (open)"
    model_server.set_script({"steps": [{"text": "sure"}, {"text": summary}]})
    async with pooled_rig(tmp_path, sqlite_store, model_server, {}) as p:
        client = await p.rig.client()
        session_id = await created(client, model="chosen")
        await client.call("session/attach", sessionId=session_id)
        long_request = "please look into the greeting; " + "here is some background. " * 80
        await client.call("turn/start", sessionId=session_id, text=long_request)
        await client.next_event(lambda e: isinstance(e, TurnCompleted))
        result = await client.call("session/compact", sessionId=session_id)
        assert getattr(result, "compacted", None) is True, result
        assert [r["model"] for r in model_server.requests] == ["chosen", "chosen"]


async def test_the_summary_step_of_a_turn_asks_the_session_s_model_within_the_budget_now(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> None:
    """Automatic compaction, in a turn: the window set in the config file since the last turn
    makes the conversation too long, and the session's own model writes the summary."""
    summary = "## User requests\n- the background (noted)"
    model_server.set_script(
        {"steps": [{"text": "noted"}, {"text": summary}, {"text": "after the summary"}]}
    )
    async with pooled_rig(tmp_path, sqlite_store, model_server, {}) as p:
        client = await p.rig.client()
        session_id = await created(client, model="chosen")
        await client.call("session/attach", sessionId=session_id)
        background = "some background for the summary to replace. " * 400
        await client.call("turn/start", sessionId=session_id, text=background)
        await client.next_event(lambda e: isinstance(e, TurnCompleted))
        p.write('model = "configured"\ncontext_window = 6000\nmax_output_tokens = 1000\n')
        await client.call("turn/start", sessionId=session_id, text="and now?")
        await client.next_event(lambda e: isinstance(e, TurnCompleted))
        requests = model_server.requests
        assert [r["model"] for r in requests] == ["chosen", "chosen", "chosen"]
        assert not any(background in str(m["content"]) for m in requests[-1]["messages"])
