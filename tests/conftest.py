"""Fixtures: an isolated home, a scripted model server, a workspace, the real daemon, and the
real store for in-process tests.

Daemons run no language servers unless the test is marked `language_servers`.

A test marked `shared_daemon` (or in a module whose `pytestmark` has it) gets the daemon its
module shares instead of a fresh one, saving a daemon start: its `daemon`, `home` and
`workspace` are that daemon's, and `model_server` is the module's server with the default
script set again. Such a test must create its own sessions, leave the daemon running, and
assert nothing about state other tests may leave behind (other sessions, files it did not
write). Unmarked tests, and marked ones that ask for no `daemon`, get fresh everything.
"""

import compileall
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, start_daemon
from tether.daemon.sessions.store import Store
from tether.testing import ModelServer

DEFAULT_SCRIPT = {"steps": [{"text": "ok"}]}
REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Cache tether's own bytecode before the suite starts its hundreds of daemons and CLIs:
    where PYTHONDONTWRITEBYTECODE is set, each of them would otherwise compile every module it
    imports again (the installed packages are compiled by `uv sync`, see pyproject). Done once,
    by the process that starts pytest-xdist's workers (or the only one)."""
    if hasattr(config, "workerinput"):
        return
    for package in ("protocol", "daemon", "clients"):
        compileall.compile_dir(REPO / package, quiet=1, workers=1)


def _shared(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("shared_daemon") is not None


def _shared_daemon_of(request: pytest.FixtureRequest) -> DaemonProcess | None:
    """The module's shared daemon, when this test uses one."""
    if _shared(request) and "daemon" in request.fixturenames:
        daemon: DaemonProcess = request.getfixturevalue("module_daemon")
        return daemon
    return None


def make_workspace(root: Path) -> Path:
    root.mkdir()
    (root / "README.md").write_text("# Demo project\nIt greets.\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    return root


@pytest.fixture(scope="module")
def module_model_server() -> Iterator[ModelServer]:
    with ModelServer(DEFAULT_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def module_daemon(
    tmp_path_factory: pytest.TempPathFactory, module_model_server: ModelServer
) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("shared-daemon")
    home = Home(root / "user", module_model_server.base_url)
    proc = start_daemon(home, make_workspace(root / "project"), "--idle-timeout", "0")
    yield proc
    if proc.proc.poll() is None:
        proc.stop()


@pytest.fixture
def model_server(request: pytest.FixtureRequest) -> Iterator[ModelServer]:
    if _shared(request):
        server: ModelServer = request.getfixturevalue("module_model_server")
        server.set_script(DEFAULT_SCRIPT)
        yield server
        return
    with ModelServer(DEFAULT_SCRIPT) as server:
        yield server


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path, model_server: ModelServer) -> Home:
    shared = _shared_daemon_of(request)
    if shared is not None:
        return shared.home
    servers = request.node.get_closest_marker("language_servers") is not None
    return Home(tmp_path / "user", model_server.base_url, language_servers=servers)


@pytest.fixture
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    shared = _shared_daemon_of(request)
    if shared is not None:
        return shared.workspace
    return make_workspace(tmp_path / "project")


@pytest.fixture
def daemon(request: pytest.FixtureRequest, home: Home, workspace: Path) -> Iterator[DaemonProcess]:
    shared = _shared_daemon_of(request)
    if shared is not None:
        assert shared.proc.poll() is None, "an earlier test stopped the shared daemon"
        yield shared
        assert shared.proc.poll() is None, "a test marked shared_daemon stopped the daemon"
        return
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
