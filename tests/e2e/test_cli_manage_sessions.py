"""`tether fork`, `rename`, `export` and `sessions --search` against the real daemon and the
scripted model server, as a person types them."""

import stat
import sys
from pathlib import Path

import msgspec
import pytest

from tests.screen import CTRL_D, ENTER, Terminal
from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    create_session,
    read_events,
    read_snapshot,
)
from tether.clients.core.rpc import CallError
from tether.protocol.errors import ErrorCode
from tether.protocol.events import ItemCompleted, SessionRenamed, TurnStarted
from tether.protocol.items import AgentMessage, ToolCall
from tether.protocol.methods import (
    DAEMON_STATUS,
    SESSION_EVENTS,
    SESSION_FORK,
    SESSION_LIST,
    SESSION_RENAME,
    EventRecord,
    SearchHit,
    SessionEventsParams,
    SessionForkParams,
    SessionForkResult,
    SessionRenameParams,
)
from tether.protocol.session import ForkOrigin, SessionInfo
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon


def run(home: Home, workspace: Path, *args: str) -> str:
    done = cli(home, "run", "--permission-mode", "auto", "-w", str(workspace), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sessions(home: Home, workspace: Path) -> dict[str, SessionInfo]:
    done = cli(home, "sessions", "--json", "-w", str(workspace))
    return {s.id: s for s in msgspec.json.decode(done.stdout, type=list[SessionInfo])}


def newest(daemon: DaemonProcess) -> SessionInfo:
    with daemon.client() as client:
        return client.call(SESSION_LIST).sessions[0]


def two_turns(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, word: str
) -> SessionInfo:
    model_server.set_script(
        {
            "steps": [
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "arguments": {"command": "echo '```fenced``` out'", "description": "d"},
                        }
                    ]
                },
                {"text": f"The {word} splits on whitespace."},
                {"text": "Second answer."},
            ]
        }
    )
    run(home, workspace, f"how does the {word} work?")
    session = newest(daemon)
    run(home, workspace, "-s", session.id, "and then?")
    return newest(daemon)


def test_a_session_is_renamed_searched_forked_and_exported(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    ws = ["-w", str(workspace)]
    session = two_turns(daemon, home, workspace, model_server, "zanzibarizer")
    assert session.title == "how does the zanzibarizer work?"

    # rename: trimmed; listed; empty goes back to the first message's line.
    done = cli(home, "rename", session.id[:8], "  Zanzibar", "notes ", *ws)
    assert (done.returncode, done.stdout) == (0, f"{session.id}  Zanzibar notes\n")
    assert sessions(home, workspace)[session.id].title == "Zanzibar notes"
    done = cli(home, "rename", session.id, "x" * 201, *ws)
    assert done.returncode == 1
    assert "at most 200 characters" in done.stderr
    assert sessions(home, workspace)[session.id].title == "Zanzibar notes"

    # search: readable, and as JSON.
    done = cli(home, "sessions", "--search", "ZANZIBARIZER", *ws)
    assert done.returncode == 0, done.stderr
    assert f"{session.id}  Zanzibar notes  ·  prompt in turn " in done.stdout
    assert "how does the «zanzibarizer» work?" in done.stdout
    assert "The «zanzibarizer» splits on whitespace." in done.stdout
    done = cli(home, "sessions", "--search", "zanzibarizer whitespace", "--json", *ws)
    (hit,) = msgspec.json.decode(done.stdout, type=list[SearchHit])
    assert (hit.session_id, hit.kind) == (session.id, "answer")
    done = cli(home, "sessions", "--search", "echo fenced", *ws)  # tool output is not indexed
    assert done.stdout == "nothing matches 'echo fenced'\n"
    done = cli(home, "sessions", "--search", "NEAR(", "--syntax", *ws)
    assert done.returncode == 2
    assert "is not valid" in done.stderr

    # fork: at the first turn; the note says once that files were not copied.
    with daemon.client() as client:
        events = client.call(SESSION_EVENTS, SessionEventsParams(session_id=session.id)).events
    first_turn = next(r.event.turn_id for r in events if isinstance(r.event, TurnStarted))
    done = cli(home, "fork", session.id, "--turn", first_turn, *ws)
    assert done.returncode == 0, done.stderr
    fork_id = done.stdout.strip()
    assert done.stderr.count("Files were not copied") == 1
    assert f"forked {session.id} after turn {first_turn} into {fork_id} (1 turn)" in done.stderr
    listed = sessions(home, workspace)
    assert listed[fork_id].forked_from == ForkOrigin(session_id=session.id, turn_id=first_turn)
    assert listed[fork_id].title == "Zanzibar notes (fork)"
    done = cli(home, "sessions", *ws)
    assert f"Zanzibar notes (fork)  (fork of {session.id})" in done.stdout
    with daemon.client() as client:
        configured = client.call(DAEMON_STATUS).model
    assert configured
    assert f"  {configured:<16}  Zanzibar notes\n" in done.stdout  # the model it uses
    assert not done.stdout.startswith("SESSION")  # a header on a terminal only
    # A fork of the fork is numbered; a bare fork, just after a fork, forks what was forked.
    done = cli(home, "fork", fork_id, *ws)
    assert sessions(home, workspace)[done.stdout.strip()].title == "Zanzibar notes (fork 2)"
    done = cli(home, "fork", *ws)
    assert done.returncode == 0, done.stderr
    assert f"forked {session.id} after turn" in done.stderr
    done = cli(home, "fork", session.id, "--json", *ws)
    forked = msgspec.json.decode(done.stdout, type=SessionForkResult)
    assert forked.session.turn_count == 2
    done = cli(home, "fork", session.id, "--turn", "t_nope", *ws)
    assert done.returncode == 2
    assert "has no turn 't_nope'" in done.stderr

    # export, Markdown: the title, the metadata, each turn, the call folded with its output.
    done = cli(home, "export", session.id, *ws)
    assert done.returncode == 0, done.stderr
    md = done.stdout
    assert md.startswith("# Zanzibar notes\n\n- Session: `" + session.id + "`\n")
    assert md.index("## Turn 1") < md.index("## Turn 2")
    assert "**Prompt**\n\n> how does the zanzibarizer work?" in md
    assert "**Answer**\n\nThe zanzibarizer splits on whitespace." in md
    assert (
        "<details><summary>✓ run_command(command=&quot;echo &#x27;```fenced``` out&#x27;&quot;"
        in md
    )
    assert "\n```fenced``` out\n````\n" in md  # a longer fence than the output's own
    assert f"- Model: {configured} (the configured model, as of now)\n" in md
    done = cli(home, "export", fork_id, *ws)
    assert f"- Forked from: `{session.id}` after turn `{first_turn}`" in done.stdout

    # export, JSON lines to a file: each line an EventRecord, the daemon's whole log.
    target = tmp_path / "log.jsonl"
    done = cli(home, "export", session.id, "--format", "json", "-o", str(target), *ws)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    decoder = msgspec.json.Decoder(EventRecord)
    records = [decoder.decode(line) for line in target.read_bytes().splitlines()]
    with daemon.client() as client:
        log = client.call(SESSION_EVENTS, SessionEventsParams(session_id=session.id)).events
    assert records == log
    assert [r.seq for r in records] == sorted({r.seq for r in records})
    calls = [
        r.event.item
        for r in records
        if isinstance(r.event, ItemCompleted) and isinstance(r.event.item, ToolCall)
    ]
    assert [c.tool for c in calls] == ["run_command"]
    # A transcript holds code and command output: the owner alone reads it, a file that was
    # there before included (it is replaced, not rewritten in place).
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    existing = tmp_path / "transcript.md"
    existing.write_text("old\n")
    existing.chmod(0o644)
    done = cli(home, "export", session.id, "-o", str(existing), *ws)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600
    assert existing.read_text().startswith("# ")

    done = cli(home, "export", "s_nothing_like_it", *ws)
    assert done.returncode == 2


def test_slash_fork_switches_to_a_fork_and_slash_rename_titles_it(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"text": "first answer"}, {"text": "in the fork"}]})
    argv = [sys.executable, "-P", "-m", "tether.clients.cli.main", "-w", str(workspace)]
    terminal = Terminal(argv, env=home.env)
    try:
        terminal.expect("/help for commands")
        terminal.expect(" · context ")
        terminal.send(f"remember the quokka{ENTER}")
        terminal.expect("first answer")
        source = newest(daemon)
        terminal.send(f"/fork{ENTER}")
        terminal.expect("Files were not copied")
        terminal.expect("attached to session ")
        listed = sessions(home, workspace)
        (fork,) = [
            s
            for s in listed.values()
            if s.forked_from is not None and s.forked_from.session_id == source.id
        ]
        assert fork.turn_count == 1
        terminal.send(f"/rename  Quokka   branch {ENTER}")
        terminal.expect("title: Quokka branch")
        terminal.send(f"and now?{ENTER}")
        terminal.expect("in the fork")
        terminal.send(CTRL_D)
        assert terminal.wait() == 0
    finally:
        terminal.close()
    listed = sessions(home, workspace)
    assert (listed[fork.id].title, listed[fork.id].turn_count) == ("Quokka branch", 2)
    assert listed[source.id].turn_count == 1
    assert model_server.requests[-1]["messages"][1:3] == [
        {"role": "user", "content": "remember the quokka"},
        {"role": "assistant", "content": "first answer"},
    ]


def test_every_attached_client_sees_a_rename_and_an_observer_may_not_make_one(
    daemon: DaemonProcess,
) -> None:
    with daemon.client() as controller, daemon.client() as observer:
        session_id = create_session(controller)
        attach(controller, session_id)
        attach(observer, session_id, role="observer")
        renamed = controller.call(
            SESSION_RENAME, SessionRenameParams(session_id=session_id, title="shared title")
        )
        assert renamed.session.title == "shared title"
        for client in (controller, observer):
            (seen,) = read_events(client, session_id, lambda events: len(events) == 1)
            assert isinstance(seen.event, SessionRenamed)
            assert seen.event.title == "shared title"
            assert seen.event.by != ""
        with pytest.raises(CallError) as caught:
            observer.call(SESSION_RENAME, SessionRenameParams(session_id=session_id, title="x"))
        assert caught.value.code == ErrorCode.NOT_CONTROLLER
        with pytest.raises(CallError) as caught:
            controller.call(SESSION_RENAME, SessionRenameParams(session_id="s_nope", title="x"))
        assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
        # An observer may fork and search: neither changes the session.
        forked = observer.call(SESSION_FORK, SessionForkParams(session_id=session_id))
        assert forked.session.title == "shared title (fork)"


def test_a_retried_answer_replaces_the_cut_one_in_the_snapshot_and_the_export(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    answer = "The quokka answer, long enough to be cut in the middle of its stream. " * 3
    model_server.set_script(
        {
            "steps": [
                {"text": answer, "chunks": 4, "drop_after_chunks": 2},
                {"text": answer, "chunks": 4},
            ]
        }
    )
    shown = run(home, workspace, "tell me about quokkas")
    assert shown.count("quokka answer") == 3  # on the terminal, once
    session = newest(daemon)
    with daemon.client() as client:
        snapshot = read_snapshot(client, session.id)
    (turn,) = snapshot.turns
    messages = [item for item in turn.items if isinstance(item, AgentMessage)]
    assert [m.text for m in messages] == [answer]
    exported = cli(home, "export", "-w", str(workspace), session.id)
    assert exported.stdout.count("quokka answer") == 3
