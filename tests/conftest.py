"""Fixtures: an isolated home, a scripted model server, a workspace, the real daemon, and the
real store for in-process tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, start_daemon
from tether.daemon.sessions.store import Store
from tether.testing import ModelServer

DEFAULT_SCRIPT = {"steps": [{"text": "ok"}]}


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer(DEFAULT_SCRIPT) as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, model_server: ModelServer) -> Home:
    return Home(tmp_path / "user", model_server.base_url)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo project\nIt greets.\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    return root


@pytest.fixture
def daemon(home: Home, workspace: Path) -> Iterator[DaemonProcess]:
    proc = start_daemon(home, workspace, "--idle-timeout", "0")
    yield proc
    if proc.proc.poll() is None:
        proc.stop()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """The real store, opened on a database in the test's temporary folder."""
    store = Store(tmp_path / "tether.sqlite3")
    store.open()
    yield store
    store.close()
