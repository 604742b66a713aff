"""The LSP client on its own: lifecycle, requests, timeouts and stopping, with a real server
(ruff) and the scripted fake from test_lsp_pool."""

import sys
from pathlib import Path

import pytest
import trio

from tests.unit.test_lsp_pool import FAKE_SERVER
from tether.daemon.lsp.client import LspClient
from tether.daemon.lsp.errors import RequestTimeout, ServerGone
from tether.daemon.lsp.servers import find_program
from tether.daemon.lsp.types import path_to_uri
from tether.daemon.procs.groups import live_members


def ruff(root: Path) -> LspClient:
    program = find_program("ruff")
    assert program is not None
    return LspClient([program, "server"], root)


async def test_ruff_session(tmp_path: Path) -> None:
    changes: list[None] = []
    client = ruff(tmp_path)
    client.on_change = lambda: changes.append(None)
    app = tmp_path / "app.py"
    uri = path_to_uri(app)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(client.serve)
            assert client.state == "running"
            assert client.server_info is not None
            assert client.server_info.name == "ruff"
            assert client.pulls_diagnostics
            assert client.sync(uri, "python", "print(nope)\n")
            assert not client.sync(uri, "python", "print(nope)\n")
            await client.pull_diagnostics(uri)
            report = client.reports[uri]
            assert [(d.code, d.severity) for d in report.items] == [("F821", 1)]
            assert (report.version, report.pulled) == (1, True)
            assert client.sync(uri, "python", "print(1)\n")
            await client.pull_diagnostics(uri)
            assert client.reports[uri].items == []
            assert client.reports[uri].version == 2
            assert client.reports[uri].serial == 2
            client.close(uri)
            assert uri not in client.documents
            assert changes
            pid = client.pid
            assert pid is not None
            client.stop()
        assert client.state == "stopped"
        assert client.failure is None
        assert client.finished.is_set()
        assert live_members(pid) == []
        with pytest.raises(ServerGone):
            client.notify("textDocument/didSave", {})


async def test_cancelling_serve_stops_the_server(tmp_path: Path) -> None:
    client = ruff(tmp_path)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(client.serve)
            nursery.cancel_scope.cancel()
    assert client.state == "stopped"
    assert client.pid is not None
    assert live_members(client.pid) == []


async def test_requests_time_out_and_the_server_is_not_hung_up_on(tmp_path: Path) -> None:
    script = tmp_path / "fake.py"
    script.write_text(FAKE_SERVER)
    client = LspClient(
        [sys.executable, str(script), "hang-after-init", str(tmp_path / "log")],
        tmp_path,
        request_timeout=0.3,
        shutdown_timeout=0.3,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(client.serve)
            client.sync("file:///x.py", "python", "x")
            with pytest.raises(RequestTimeout, match="no answer to textDocument/diagnostic"):
                await client.pull_diagnostics("file:///x.py")
            with trio.move_on_after(0.1) as scope:
                await client.pull_diagnostics("file:///x.py")
            assert scope.cancelled_caught
            assert client.alive
            assert client.statistics()["pending_requests"] == 0
            client.stop()
    assert client.state == "stopped"
    log = (tmp_path / "log").read_text()
    assert log.count('"$/cancelRequest"') == 2


async def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    client = LspClient([str(tmp_path / "missing-server")], tmp_path)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ServerGone, match="cannot start"):
                await nursery.start(client.serve)
    assert client.state == "crashed"
    assert client.finished.is_set()


def test_uris() -> None:
    path = Path("/tmp/a b/ü.py")
    assert path_to_uri(path) == "file:///tmp/a%20b/%C3%BC.py"


_CLOSES_ITS_INPUT_THEN_DIES = """
import json, os, signal, sys, time
os.close(0)
# A request the client answers: its answer finds the input pipe broken ...
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "workspace/configuration",
                   "params": {"items": []}}).encode()
sys.stdout.buffer.write(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
sys.stdout.flush()
time.sleep(0.3)  # ... before the process is gone
os.kill(os.getpid(), signal.SIGKILL)
"""


async def test_a_server_that_dies_is_reported_by_how_it_died_not_by_a_broken_pipe(
    tmp_path: Path,
) -> None:
    script = tmp_path / "dies.py"
    script.write_text(_CLOSES_ITS_INPUT_THEN_DIES)
    client = LspClient([sys.executable, str(script)], tmp_path, initialize_timeout=10)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ServerGone):
                await nursery.start(client.serve)
    assert client.state == "crashed"
    assert client.failure == "exited with signal 9"
