"""Notifications, in-process: the real sessions over a real store, the scripted model over
real HTTP, the user's notify command a real script that records what it gets, the URL a real
HTTP server on 127.0.0.1. An approval nobody sees and a turn's end are notified once, with
their JSON; one a controller saw, or one answered in time, is not. The wait itself runs on
trio's autojump clock (`Notifier` alone), so its seconds pass without sleeping."""

import http.server
import json
import stat
import threading
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.inprocess import Watcher, running_sessions
from tests.support import command_step
from tether.daemon.config.settings import Config, ConfigError, parse_config
from tether.daemon.hooks.notify import (
    DEFAULT_COMMAND,
    Notifier,
    NotifyEvent,
    NotifySettings,
    default_command,
    notify_settings,
)
from tether.daemon.logs import log
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.input import TurnRequest
from tether.daemon.sessions.models import FixedModel
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.events import ApprovalRequested
from tether.protocol.session import Role
from tether.testing import ModelServer

JSON = dict[str, Any]


class Places:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.workspace = tmp_path / "project"
        self.workspace.mkdir()
        self.store = Store(tmp_path / "tether.sqlite3")
        self.events = tmp_path / "events.jsonl"
        self.argv = tmp_path / "argv.txt"

    def recorder(self) -> str:
        """The user's notify command: appends its stdin (one JSON object) as a line of
        `events`, and its last argument and TETHER_NOTIFY_EVENT as a line of `argv`."""
        path = self.root / "notify.sh"
        path.write_text(
            "#!/bin/sh\n"
            f'cat >> "{self.events}"\necho >> "{self.events}"\n'
            "for last; do :; done\n"
            f'printf "%s|%s\\n" "$TETHER_NOTIFY_EVENT" "$last" >> "{self.argv}"\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return str(path)

    def seen(self) -> list[JSON]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines()]


@pytest.fixture
def places(tmp_path: Path) -> Iterator[Places]:
    found = Places(tmp_path)
    found.store.open()
    yield found
    found.store.close()


@asynccontextmanager
async def notifying_sessions(
    places: Places, server: ModelServer, config: Config
) -> AsyncGenerator[Sessions]:
    client = OpenAIChatClient(base_url=server.base_url, model="scripted")
    models = FixedModel(client, config)
    try:
        async with running_sessions(
            places.store, places.workspace, server, models=models
        ) as sessions:
            yield sessions
    finally:
        await client.aclose()


async def asked(sessions: Sessions, role: Role) -> tuple[Session, ApprovalRequested]:
    """A new session, watched by a client attached as `role`, whose turn has started and
    asked its first approval; and that request."""
    session = await sessions.create()
    watcher = Watcher()
    session.attach(watcher, role, None)
    sessions.start_turn(session, TurnRequest(text="go"))
    event = await watcher.wait_for(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(event, ApprovalRequested)
    return session, event


async def answer(sessions: Sessions, session: Session, request: ApprovalRequested) -> None:
    broker = await sessions.broker(session.id)
    broker.respond(request.approval.id, decision="allow", scope="once", by="test")
    await sessions.wait_idle(session.id)


ASKS = {"steps": [command_step("echo needs-you"), {"text": "all done"}]}


async def test_an_approval_nobody_sees_and_the_turns_end_run_the_command_once_each(
    places: Places,
) -> None:
    config = Config(notify=[places.recorder()], notify_after=0)
    with trio.fail_after(30), ModelServer(ASKS) as server:
        async with notifying_sessions(places, server, config) as sessions:
            # An observer sees nothing for you.
            session, request = await asked(sessions, "observer")
            await sessions.notifier.wait_quiet()
            (approval,) = places.seen()
            await answer(sessions, session, request)
            await sessions.notifier.wait_quiet()
            statistics = sessions.notifier.statistics()
    assert (statistics.delivered, statistics.pending) == (2, 0)
    first, ended = places.seen()
    assert first == approval
    assert approval == {
        "event": "approval_requested",
        "title": "tether: approval needed",
        "message": f"Approval needed in project ({session.title}): run_command echo needs-you",
        "session_id": session.id,
        "session_title": session.title,
        "turn_id": request.approval.turn_id,
        "workspace": str(places.workspace),
        "at": request.approval.requested_at,
        "status": None,
        "error": None,
        "approval": {
            "id": request.approval.id,
            "tool": "run_command",
            "kind": "command",
            "reason": request.approval.reason,
            "command": "echo needs-you",
            "path": "",
            "subagent": "",
        },
    }
    assert ended["event"] == "turn_end"
    assert ended["title"] == "tether: turn completed"
    assert ended["status"] == "completed"
    assert ended["turn_id"] == request.approval.turn_id
    assert ended["approval"] is None
    assert places.argv.read_text().splitlines() == [
        f"approval_requested|{approval['message']}",
        f"turn_end|{ended['message']}",
    ]


async def test_nothing_is_sent_for_what_an_attached_controller_got(places: Places) -> None:
    config = Config(notify=[places.recorder()], notify_after=0)
    with trio.fail_after(30), ModelServer(ASKS) as server:
        async with notifying_sessions(places, server, config) as sessions:
            session, request = await asked(sessions, "controller")
            await sessions.notifier.wait_quiet()
            await answer(sessions, session, request)
            await sessions.notifier.wait_quiet()
            statistics = sessions.notifier.statistics()
    assert (statistics.delivered, statistics.pending) == (0, 0)
    assert places.seen() == []


async def test_an_approval_answered_in_time_is_not_sent(places: Places) -> None:
    config = Config(notify=[places.recorder()], notify_after=3600)
    with trio.fail_after(30), ModelServer(ASKS) as server:
        async with notifying_sessions(places, server, config) as sessions:
            session, request = await asked(sessions, "observer")
            assert sessions.notifier.statistics().pending == 1
            await answer(sessions, session, request)
            after_answer = sessions.notifier.statistics()
    # The answer cancelled the approval's; the turn's end waits its hour (dropped on the way
    # out with the daemon).
    assert (after_answer.cancelled, after_answer.pending, after_answer.delivered) == (1, 1, 0)
    assert places.seen() == []


async def test_a_controller_that_attaches_during_the_wait_has_seen_it(places: Places) -> None:
    config = Config(notify=[places.recorder()], notify_after=3600)
    with trio.fail_after(30), ModelServer(ASKS) as server:
        async with notifying_sessions(places, server, config) as sessions:
            session, request = await asked(sessions, "observer")
            assert sessions.notifier.statistics().pending == 1
            session.attach(Watcher(), "controller", None)
            statistics = sessions.notifier.statistics()
            await answer(sessions, session, request)
    assert (statistics.cancelled, statistics.pending) == (1, 0)
    assert places.seen() == []


class _Recording(http.server.BaseHTTPRequestHandler):
    posts: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.posts.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A push server on 127.0.0.1: its topic URL and the POSTs it got."""
    posts: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Handler", (_Recording,), {"posts": posts})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mytopic", posts
    finally:
        server.shutdown()
        server.server_close()


async def test_the_turns_end_is_posted_as_json_with_a_title(
    places: Places, endpoint: tuple[str, list[tuple[str, dict[str, str], bytes]]]
) -> None:
    url, posts = endpoint
    config = Config(notify=[], notify_url=url, notify_after=0)
    with trio.fail_after(30), ModelServer({"steps": [{"text": "all done"}]}) as server:
        async with notifying_sessions(places, server, config) as sessions:
            session = await sessions.create(title="tidy up")
            sessions.start_turn(session, TurnRequest(text="go"))
            await sessions.wait_idle(session.id)
            await sessions.notifier.wait_quiet()
    ((path, headers, body),) = posts
    assert path == "/mytopic"
    assert headers["Title"] == "tether: turn completed"
    assert headers["Content-Type"] == "application/json"
    event = json.loads(body)
    assert event["event"] == "turn_end"
    assert event["message"] == "Turn completed in project (tidy up)"
    assert event["session_id"] == session.id


async def test_a_command_or_url_that_fails_leaves_the_turn_alone(places: Places) -> None:
    # Nothing listens on port 9 of 127.0.0.1 (discard); the command does not exist.
    config = Config(
        notify=[str(places.root / "missing")],
        notify_url="http://user:pw@127.0.0.1:9/topic?auth=secret",
        notify_after=0,
    )
    with (
        trio.fail_after(30),
        ModelServer({"steps": [{"text": "all done"}]}) as server,
        log.capture() as records,
    ):
        async with notifying_sessions(places, server, config) as sessions:
            session = await sessions.create()
            sessions.start_turn(session, TurnRequest(text="go"))
            await sessions.wait_idle(session.id)
            await sessions.notifier.wait_quiet()
            statistics = sessions.notifier.statistics()
    assert statistics.delivered == 1
    assert session.turns[-1].status == "completed"
    assert session.turns[-1].error is None
    failed = {str(r["msg"]): r for r in records if r["level"] == "warning"}
    assert failed["the notify command failed"]["exit_code"] == 127
    assert failed["the notify POST failed"]["url"] == "http://127.0.0.1:9/topic"
    assert "secret" not in json.dumps(records)


# --- the wait, on trio's clock ---------------------------------------------------------------


def _event(key: str = "t_1") -> NotifyEvent:
    return NotifyEvent(
        event="turn_end",
        title="tether: turn completed",
        message="Turn completed in project",
        session_id="s_1",
        session_title="",
        turn_id=key,
        workspace="/project",
        at=0.0,
        status="completed",
    )


class Delivered:
    def __init__(self) -> None:
        self.at: list[tuple[float, str]] = []

    async def __call__(self, event: NotifyEvent, settings: NotifySettings) -> None:
        self.at.append((trio.current_time(), event.turn_id))


@asynccontextmanager
async def serving(delivered: Delivered) -> AsyncGenerator[Notifier]:
    notifier = Notifier(deliver=delivered)
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.serve)
        yield notifier
        nursery.cancel_scope.cancel()


SETTINGS = NotifySettings(command=("true",), after=10)


async def test_an_event_is_delivered_once_its_wait_is_over_and_only_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    delivered = Delivered()
    async with serving(delivered) as notifier:
        start = trio.current_time()
        notifier.schedule("t_1", _event(), SETTINGS)
        notifier.schedule("t_1", _event(), SETTINGS)  # the same event again: one notice
        await trio.sleep(9.5)
        assert delivered.at == []
        await trio.sleep(100)
    assert delivered.at == [(pytest.approx(start + 10), "t_1")]


async def test_a_cancelled_or_seen_event_is_never_delivered(
    autojump_clock: trio.abc.Clock,
) -> None:
    delivered = Delivered()
    async with serving(delivered) as notifier:
        notifier.schedule("a_1", _event("a_1"), SETTINGS)
        notifier.schedule("t_2", _event("t_2"), SETTINGS)
        notifier.schedule("t_3", _event("t_3"), NotifySettings(command=("true",), after=20))
        await trio.sleep(5)
        notifier.cancel("a_1")
        notifier.seen("s_other")
        await trio.sleep(10)
        notifier.seen("s_1")
        await trio.sleep(100)
        statistics = notifier.statistics()
    assert [key for _, key in delivered.at] == ["t_2"]
    assert (statistics.delivered, statistics.cancelled, statistics.pending) == (1, 2, 0)


async def test_settings_that_notify_nothing_schedule_nothing() -> None:
    delivered = Delivered()
    async with serving(delivered) as notifier:
        notifier.schedule("t_1", _event(), NotifySettings())
        assert notifier.statistics().pending == 0


# --- settings --------------------------------------------------------------------------------


def test_the_settings_are_read_and_a_bad_url_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    config = parse_config(
        path,
        'notify = ["notify-send", "tether"]\nnotify_url = "https://ntfy.sh/t"\nnotify_after = 0\n',
    )
    assert (config.notify, config.notify_url, config.notify_after) == (
        ["notify-send", "tether"],
        "https://ntfy.sh/t",
        0,
    )
    with pytest.raises(ConfigError, match=r"notify_url: 'ntfy.sh/t' is not an http"):
        parse_config(path, 'notify_url = "ntfy.sh/t"\n')
    with pytest.raises(ConfigError, match=r"line 1: notify_after"):
        parse_config(path, "notify_after = -1\n")
    with pytest.raises(ConfigError, match=r"line 1: notify"):
        parse_config(path, 'notify = [""]\n')


def test_notify_send_is_the_default_only_on_a_desktop_that_has_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "notify-send"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    path = str(bin_dir)
    assert default_command({"PATH": path, "DISPLAY": ":0"}) == DEFAULT_COMMAND
    assert default_command({"PATH": path, "WAYLAND_DISPLAY": "wayland-0"}) == DEFAULT_COMMAND
    assert default_command({"PATH": path}) == ()  # no graphical session (ssh, a server)
    assert default_command({"PATH": str(tmp_path), "DISPLAY": ":0"}) == ()
    desktop = {"PATH": path, "DISPLAY": ":0"}
    assert notify_settings(Config(), env=desktop, cwd=tmp_path).command == DEFAULT_COMMAND
    off = notify_settings(Config(notify=[]), env=desktop, cwd=tmp_path)
    assert not off.enabled
