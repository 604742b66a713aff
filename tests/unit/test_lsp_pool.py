"""The language-server pool against real servers (ruff, basedpyright from the dev dependencies)
and a scripted fake server for what real ones do not do on demand: push diagnostics, with and
without versions, hang, crash on every edit. One conformance test runs against all of them."""

import json
import os
import signal
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tether.daemon.lsp.diagnostics import Diagnostic
from tether.daemon.lsp.pool import DiagnosticsEvent, EventKind, LspPool, ServerEvent
from tether.daemon.lsp.report import format_report
from tether.daemon.lsp.servers import LspServerConfig
from tether.daemon.procs.groups import live_members

SERVER_FRAMING = r"""
import json
import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer


def read():
    length = None
    while True:
        line = stdin.readline()
        if not line:
            sys.exit(0)
        if not line.strip():
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return json.loads(stdin.read(length))


def write(message):
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    stdout.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stdout.flush()
"""
"""How a scripted language server reads and writes LSP messages on stdin and stdout
(`read()`, `write(message)`); its script follows."""

FAKE_SERVER = (
    SERVER_FRAMING
    + r'''
"""A scripted language server: python fake_server.py MODE LOG."""
mode, log_path = sys.argv[1], sys.argv[2]


def log(entry):
    with open(log_path, "a") as log:
        log.write(json.dumps(entry) + "\n")


def check(uri, text, version):
    """Report a syntax error the way Python's compiler sees it (an error), and every line
    holding WARN as a warning."""
    diagnostics = []
    try:
        compile(text, "file", "exec")
    except SyntaxError as exc:
        line, column = (exc.lineno or 1) - 1, (exc.offset or 1) - 1
        position = {"line": line, "character": column}
        diagnostics.append({"range": {"start": position, "end": position}, "severity": 1,
                            "source": "fake", "code": "E999", "message": exc.msg})
    for number, line in enumerate(text.splitlines()):
        if "WARN" in line:
            position = {"line": number, "character": line.index("WARN")}
            diagnostics.append({"range": {"start": position, "end": position}, "severity": 2,
                                "message": "a warning"})
    params = {"uri": uri, "diagnostics": diagnostics}
    if mode != "unversioned":
        params["version"] = version
    write({"method": "textDocument/publishDiagnostics", "params": params})


SERVER_REQUESTS = [
    ("workspace/configuration", {"items": [{"section": "fake.level"}, {"section": "missing"}]}),
    ("client/registerCapability", {"registrations": [
        {"id": "w", "method": "workspace/didChangeWatchedFiles", "registerOptions": {}}]}),
    ("window/workDoneProgress/create", {"token": "t"}),
    ("fake/unknown", {}),
]

while True:
    message = read()
    method = message.get("method")
    if method and method != "initialize":
        log({"method": method, "params": message.get("params")})
    if mode == "hang":
        continue
    if method == "initialize":
        capabilities = {"textDocumentSync": 1}
        if mode == "hang-after-init":
            capabilities["diagnosticProvider"] = {"interFileDependencies": False,
                                                  "workspaceDiagnostics": False}
        write({"id": message["id"], "result": {"capabilities": capabilities,
                                               "serverInfo": {"name": "fake"}}})
    elif mode == "hang-after-init":
        continue
    elif method == "initialized":
        for number, (request, params) in enumerate(SERVER_REQUESTS):
            write({"id": 1000 + number, "method": request, "params": params})
    elif method is None:
        log({"response": message.get("id"), "result": message.get("result"),
             "error": message.get("error")})
    elif method in ("textDocument/didOpen", "textDocument/didChange"):
        if mode == "crash-on-edit":
            sys.exit(3)
        params = message["params"]
        document = params["textDocument"]
        if method.endswith("didOpen"):
            text = document["text"]
        else:
            text = params["contentChanges"][-1]["text"]
        check(document["uri"], text, document["version"])
    elif method == "shutdown":
        write({"id": message["id"], "result": None})
    elif method == "exit":
        sys.exit(0)
'''
)

BROKEN = "def f(:\n    pass\n"
FIXED = "def f():\n    pass\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n')
    return root


@pytest.fixture
def fake_server(tmp_path: Path) -> Path:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return script


def fake(
    script: Path, mode: str, log: Path, name: str = "fake", root_markers: list[str] | None = None
) -> LspServerConfig:
    return LspServerConfig(
        name=name,
        command=[sys.executable, str(script), mode, str(log)],
        extensions=[".py"],
        root_markers=root_markers or [],
        settings={"fake": {"level": "strict"}},
    )


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[EventKind, ServerEvent | DiagnosticsEvent]] = []
        self._arrived = trio.Event()

    def __call__(self, kind: EventKind, detail: ServerEvent | DiagnosticsEvent) -> None:
        self.events.append((kind, detail))
        self._arrived.set()
        self._arrived = trio.Event()

    async def wait_for_state(self, pool: LspPool, name: str, state: str) -> None:
        """Until `pool`, which reports its events here, has its server `name` in `state` (a
        server's new state is recorded before the event that tells it)."""
        with trio.fail_after(10):
            while not any(s.name == name and s.state == state for s in pool.status()):
                await self._arrived.wait()

    def kinds(self) -> list[EventKind]:
        return [kind for kind, _ in self.events]

    def server_events(self, kind: EventKind) -> list[ServerEvent]:
        return [d for k, d in self.events if k == kind and isinstance(d, ServerEvent)]


@asynccontextmanager
async def serving(pool: LspPool) -> AsyncGenerator[LspPool]:
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.serve)
        try:
            yield pool
        finally:
            nursery.cancel_scope.cancel()


def errors_in(diagnostics: list[Diagnostic]) -> list[tuple[int, str, str]]:
    return [(d.line, d.source, d.code) for d in diagnostics]


def alive(pid: int) -> bool:
    return bool(live_members(pid))


# --- conformance: the same edit-and-fix flow against every kind of server ---------------------


async def syntax_error_appears_and_goes(pool: LspPool, workspace: Path) -> None:
    """The edit-and-fix flow every kind of server must follow, on `workspace`'s app.py, with
    `pool` serving."""
    app = workspace / "app.py"
    app.write_text(FIXED)
    assert await pool.diagnostics_after_edit([app], wait=5) == []
    app.write_text(BROKEN)
    broken = await pool.diagnostics_after_edit([app], wait=5)
    assert broken, "a syntax error is an error for every server"
    assert all(d.severity == "error" and d.path == str(app) for d in broken)
    assert broken[0].line == 1
    # Checked again unchanged: the answer the server gave for this text (pushed servers) or
    # gives again at once (pulled ones). The call ends on that answer, not at its deadline,
    # which the test's own limit would never let it reach.
    assert await pool.diagnostics_after_edit([app], wait=3600) == broken
    app.write_text(FIXED)
    assert await pool.diagnostics_after_edit([app], wait=5) == []


@pytest.mark.parametrize("server", ["ruff", "fake-push", "fake-unversioned"], ids=str)
async def test_syntax_error_appears_and_goes(
    server: str, workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    """ruff is asked (pull); the fake pushes, with the version or without (then the settle
    rule ends the wait). basedpyright follows the same flow in its own test below, which
    starts it once for both."""
    if server.startswith("fake"):
        mode = "push" if server == "fake-push" else "unversioned"
        pool = LspPool(workspace, [fake(fake_server, mode, tmp_path / "log")], builtin=False)
    else:
        pool = LspPool(workspace, builtin=[server])
    with trio.fail_after(30):
        async with serving(pool):
            await syntax_error_appears_and_goes(pool, workspace)


# --- real servers -----------------------------------------------------------------------------


async def test_ruff_reports_errors_only(workspace: Path) -> None:
    """ruff's severities: syntax errors and F821 (undefined name) are errors; F401 (unused
    import) is a warning, so it reaches clients as an event but not the model."""
    events = Recorder()
    pool = LspPool(workspace, builtin=["ruff"], on_event=events)
    app = workspace / "app.py"
    app.write_text("import os\n\nprint(undefined_name)\n")
    with trio.fail_after(20):
        async with serving(pool):
            errors = await pool.diagnostics_after_edit([app])
    assert errors_in(errors) == [(3, "Ruff", "F821")]
    assert errors[0].column == 7
    report = format_report(errors, workspace)
    assert report == (
        "Errors reported by language servers:\n"
        "app.py:3:7: error: Undefined name `undefined_name` [Ruff F821]"
    )
    event = next(d for k, d in events.events if k == "diagnostics")
    assert isinstance(event, DiagnosticsEvent)
    assert {(d.code, d.severity) for d in event.diagnostics} >= {
        ("F401", "warning"),
        ("F821", "error"),
    }


async def test_basedpyright_syntax_then_type_errors_after_edits_then_fixed(
    workspace: Path,
) -> None:
    """The conformance flow (asked by pull, only after it registers the capability), then a
    type error: one basedpyright start, the costliest server to start, for both."""
    pool = LspPool(workspace, builtin=["basedpyright"])
    app = workspace / "app.py"
    with trio.fail_after(45):
        async with serving(pool):
            await syntax_error_appears_and_goes(pool, workspace)
            app.write_text("x: int = 1\n")
            assert await pool.diagnostics_after_edit([app], wait=10) == []
            # A column after a character outside the BMP: the server counts UTF-16 units.
            line = 'label = "😀"; x: int = "s"'
            app.write_text(line + "\n")
            errors = await pool.diagnostics_after_edit([app])
            assert errors_in(errors) == [(1, "basedpyright", "reportAssignmentType")]
            assert errors[0].column == line.index('"s"') + 1
            assert "is not assignable" in errors[0].message
            report = format_report(errors, workspace)
            assert report.startswith("Errors reported by language servers:\napp.py:1:")
            app.write_text('label = "😀"; x: int = 2\n')
            assert await pool.diagnostics_after_edit([app]) == []


async def test_warm_server_is_reused(workspace: Path, fake_server: Path, tmp_path: Path) -> None:
    events = Recorder()
    pushing = fake(fake_server, "push", tmp_path / "log")
    pool = LspPool(workspace, [pushing], builtin=["ruff"], on_event=events)
    app = workspace / "app.py"
    with trio.fail_after(30):
        async with serving(pool):
            app.write_text("print(nope)\ndef f(:\n")
            first = await pool.diagnostics_after_edit([app], wait=10)
            pids = {s.name: s.pid for s in pool.status()}
            app.write_text("print(nope2)\ndef g(:\n")
            second = await pool.diagnostics_after_edit([app])
            assert {s.name: s.pid for s in pool.status()} == pids
    assert {d.source for d in first} == {d.source for d in second} == {"Ruff", "fake"}
    assert events.kinds().count("server_started") == 2
    assert sorted(s.name for s in pool.status()) == ["fake", "ruff"]


async def test_killed_server_is_reported_and_restarted(workspace: Path) -> None:
    events = Recorder()
    pool = LspPool(workspace, builtin=["ruff"], on_event=events, backoff=0.05)
    app = workspace / "app.py"
    app.write_text("print(undefined_name)\n")
    with trio.fail_after(40):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([app], wait=10)
            (before,) = pool.status()
            assert before.state == "running"
            assert before.pid is not None
            os.killpg(before.pid, signal.SIGKILL)
            await events.wait_for_state(pool, "ruff", "crashed")
            (crashed,) = pool.status()
            assert crashed.pid is None
            assert "signal 9" in crashed.last_error
            (report,) = events.server_events("server_crashed")
            assert "ruff" in report.message
            assert report.message.endswith("(in 0.05 s at the earliest)")
            assert report.pid == before.pid

            app.write_text("print(other_name)\n")
            errors = await pool.diagnostics_after_edit([app], wait=10)
            assert errors_in(errors) == [(1, "Ruff", "F821")]
            (after,) = pool.status()
            assert after.state == "running"
            assert after.restarts == 1
            assert after.pid not in (None, before.pid)
            assert not alive(before.pid)
    assert events.server_events("server_restarted")[0].restarts == 1


async def test_stopping_the_pool_stops_every_server(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    events = Recorder()
    per_project = fake(fake_server, "push", tmp_path / "log", root_markers=["pyproject.toml"])
    pool = LspPool(workspace, [per_project], builtin=["ruff"], on_event=events)
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\n')
    files = [workspace / "a.py", workspace / "pkg" / "b.py"]
    for path in files:
        path.write_text("x = 1\n")
    with trio.fail_after(30):
        async with serving(pool):
            await pool.diagnostics_after_edit(files, wait=10)
            running = pool.status()
            # One ruff for the workspace; the other server per project root.
            assert sorted((s.name, Path(s.root).name) for s in running) == [
                ("fake", "pkg"),
                ("fake", "ws"),
                ("ruff", "ws"),
            ]
            pids = [s.pid for s in running]
            assert all(pid is not None and alive(pid) for pid in pids)
        assert {s.state for s in pool.status()} == {"stopped"}
        assert not any(alive(pid) for pid in pids if pid is not None)
        # Not serving: nothing starts, nothing raises.
        assert await pool.diagnostics_after_edit(files) == []
    assert "server_crashed" not in events.kinds()


# --- the fake server: server requests, hangs, crash loops, idle ------------------------------


async def test_server_requests_are_answered(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    pool = LspPool(workspace, [fake(fake_server, "push", log)], builtin=False)
    app = workspace / "app.py"
    app.write_text("x = 1  # WARN\n")
    with trio.fail_after(20):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([app]) == []
            (workspace / "pyproject.toml").write_text("[project]\n")
            await pool.diagnostics_after_edit([app, workspace / "pyproject.toml"])
            app.unlink()
            assert await pool.diagnostics_after_edit([app]) == []
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    answers = {e["response"]: (e["result"], e["error"]) for e in entries if "response" in e}
    assert answers[1000] == (["strict", None], None)  # workspace/configuration, per item
    assert answers[1001] == (None, None)  # client/registerCapability
    assert answers[1002] == (None, None)  # window/workDoneProgress/create
    assert answers[1003][1]["code"] == -32601  # anything else: method not found
    methods = [e["method"] for e in entries if "method" in e]
    assert methods[0] == "initialized"
    assert methods.count("textDocument/didOpen") == 1
    assert methods.count("textDocument/didSave") == 1  # the second sync changed nothing
    assert methods[-4:] == [
        "workspace/didChangeWatchedFiles",
        "textDocument/didClose",
        "shutdown",
        "exit",
    ]
    watched = [e["params"]["changes"] for e in entries if e.get("method", "").endswith("Files")]
    assert {"uri": (workspace / "pyproject.toml").as_uri(), "type": 2} in watched[-2]
    assert watched[-1] == [{"uri": app.as_uri(), "type": 3}]


async def test_server_that_never_answers_initialize(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    events = Recorder()
    pool = LspPool(
        workspace,
        [fake(fake_server, "hang", tmp_path / "log")],
        builtin=False,
        initialize_timeout=0.3,
        on_event=events,
    )
    app = workspace / "app.py"
    app.write_text(BROKEN)
    with trio.fail_after(20):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([app]) == []
            (status,) = pool.status()
            assert status.state == "crashed"
            assert status.last_error == "did not answer initialize within 0.3 s"
            # A server that failed while starting is not waited for: the next call, made
            # before its backoff is over, leaves it crashed and starts nothing.
            assert await pool.diagnostics_after_edit([app]) == []
            (status,) = pool.status()
            assert (status.state, status.restarts) == ("crashed", 0)
    assert events.kinds() == ["server_crashed", "diagnostics", "diagnostics"]


async def test_server_that_hangs_after_initialize(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    """It advertises pull diagnostics and never answers: the call ends after `wait`."""
    pool = LspPool(
        workspace,
        [fake(fake_server, "hang-after-init", tmp_path / "log")],
        builtin=False,
        shutdown_timeout=0.2,
        first_wait=0.2,
    )
    app = workspace / "app.py"
    app.write_text(BROKEN)
    with trio.fail_after(20):
        async with serving(pool):
            await pool.diagnostics_after_edit([app], wait=0.2)  # started: cold
            # Warm, asked and never answered: the call gives up at its wait, with nothing,
            # and the server is not taken for crashed.
            assert await pool.diagnostics_after_edit([app], wait=0.2) == []
            (status,) = pool.status()
            assert (status.state, status.restarts) == ("running", 0)
        # It never answers `shutdown` either: the pool kills it.
        assert pool.status()[0].state == "stopped"


async def test_crash_loop_backs_off(workspace: Path, fake_server: Path, tmp_path: Path) -> None:
    events = Recorder()
    pool = LspPool(
        workspace,
        [fake(fake_server, "crash-on-edit", tmp_path / "log")],
        builtin=False,
        on_event=events,
        backoff=0.25,
    )
    app = workspace / "app.py"
    app.write_text(BROKEN)
    with trio.fail_after(20):
        async with serving(pool):
            # The server dies on the edit: the call is done with it then, not at a deadline
            # the test's own limit would never let it reach.
            assert await pool.diagnostics_after_edit([app], wait=3600) == []
            assert pool.status()[0].state == "crashed"
            # The first crash after a good start: restarted within the call, once its first
            # backoff has passed (the events below say when each attempt may come).
            assert await pool.diagnostics_after_edit([app], wait=1.5) == []
            await events.wait_for_state(pool, "fake", "crashed")
            assert pool.status()[0].restarts == 1
            # Crashing again, it is skipped (no restart, it stays crashed) until its next
            # attempt is due, however long the call would wait.
            assert await pool.diagnostics_after_edit([app], wait=1.5) == []
            assert pool.status()[0].state == "crashed"
            assert pool.status()[0].restarts == 1
    first, second = events.server_events("server_crashed")
    assert "exited with status 3" in first.message
    assert first.message.endswith("in 0.25 s at the earliest)")
    assert second.message.endswith("in 0.5 s at the earliest)")


async def test_idle_server_stops_and_starts_again(
    workspace: Path, fake_server: Path, tmp_path: Path
) -> None:
    events = Recorder()
    pool = LspPool(
        workspace,
        [fake(fake_server, "push", tmp_path / "log")],
        builtin=False,
        idle_timeout=0.3,
        on_event=events,
    )
    app = workspace / "app.py"
    app.write_text(BROKEN)
    with trio.fail_after(20):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([app])
            (first,) = pool.status()
            await events.wait_for_state(pool, "fake", "stopped")
            assert first.pid is not None
            assert not alive(first.pid)
            assert await pool.diagnostics_after_edit([app])
            (second,) = pool.status()
            assert second.state == "running"
            assert second.restarts == 0
            assert second.pid != first.pid
    assert events.kinds().count("server_started") == 2
    assert "idle" in events.server_events("server_stopped")[0].message


async def test_prewarm_starts_without_waiting(workspace: Path) -> None:
    events = Recorder()
    pool = LspPool(workspace, builtin=["ruff"], on_event=events)
    with trio.fail_after(20):
        async with serving(pool):
            pool.prewarm([workspace / "app.py", workspace / "README.md", Path("/elsewhere.py")])
            await events.wait_for_state(pool, "ruff", "running")
            assert [s.name for s in pool.status()] == ["ruff"]


async def test_prewarm_of_files_no_server_checks_starts_nothing(workspace: Path) -> None:
    events = Recorder()
    pool = LspPool(workspace, builtin=["ruff"], on_event=events)
    with trio.fail_after(20):
        async with serving(pool):
            nursery = pool._lent.nursery
            assert nursery is not None
            before = len(nursery.child_tasks)
            pool.prewarm([workspace / "README.md", workspace])
            assert len(nursery.child_tasks) == before
            pool.prewarm([workspace / "app.py"])
            assert len(nursery.child_tasks) == before + 1
            await events.wait_for_state(pool, "ruff", "running")


async def test_files_nobody_checks_are_ignored(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(BROKEN)
    (workspace / "notes.md").write_text("# notes\n")
    pool = LspPool(workspace, builtin=["ruff"])
    with trio.fail_after(20):
        async with serving(pool):
            found = await pool.diagnostics_after_edit(
                [outside, workspace / "notes.md", workspace / "missing.py"]
            )
            assert found == []
            assert [s.name for s in pool.status()] == ["ruff"]  # started for missing.py


async def test_server_that_exits_at_once(workspace: Path, tmp_path: Path) -> None:
    """Its stderr goes to the log folder."""
    events = Recorder()
    broken = LspServerConfig(
        name="broken",
        command=[sys.executable, "-c", "import sys; sys.stderr.write('no config found')"],
        extensions=[".py"],
    )
    logs = tmp_path / "logs"
    pool = LspPool(workspace, [broken], builtin=False, on_event=events, log_dir=logs)
    (workspace / "app.py").write_text("x = 1\n")
    with trio.fail_after(20):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([Path("app.py")]) == []
            (status,) = pool.status()
            assert status.state == "crashed"
            assert status.last_error == "exited with status 0"
    assert events.kinds()[0] == "server_crashed"
    (log,) = logs.iterdir()
    assert log.name.startswith("broken-")
    assert log.read_text() == "no config found"


async def test_a_worktree_added_as_a_project_gets_servers_rooted_in_it(
    workspace: Path, tmp_path: Path
) -> None:
    """A worktree session's edits lie outside the workspace: ignored until its folder is a
    project of the pool, then checked by a server of its own rooted there."""
    worktree = tmp_path / "data" / "worktrees" / "s_1"
    worktree.mkdir(parents=True)
    app = worktree / "app.py"
    app.write_text("print(undefined_name)\n")
    pool = LspPool(workspace, builtin=["ruff"])
    with trio.fail_after(20):
        async with serving(pool):
            assert await pool.diagnostics_after_edit([app]) == []
            pool.add_project(worktree)
            errors = await pool.diagnostics_after_edit([app])
            roots = [s.root for s in pool.status()]
    assert errors_in(errors) == [(1, "Ruff", "F821")]
    assert roots == [str(worktree.resolve())]
