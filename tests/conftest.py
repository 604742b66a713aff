"""Fixtures: an isolated home, a scripted model server, a workspace, the real daemon, and the
real store for in-process tests.

Daemons run no language servers unless the test is marked `language_servers`.

A test marked `shared_daemon` (or in a module whose `pytestmark` has it) gets the daemon its
module shares instead of a fresh one, saving a daemon start: its `daemon`, `home` and
`workspace` are that daemon's, and `model_server` is the module's server with the default
script set again. Such a test must create its own sessions, leave the daemon running, and
assert nothing about state other tests may leave behind (other sessions, files it did not
write); the turns it leaves running are cancelled after it, so none of them takes a step of
the next test's script or leaves an approval pending. Unmarked tests, and marked ones that ask
for no `daemon`, get fresh everything.
"""

import compileall
import importlib
import os
import signal
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from tests.support import DaemonProcess, Home, start_daemon
from tether.daemon.sessions.store import Store
from tether.testing import ModelServer

DEFAULT_SCRIPT = {"steps": [{"text": "ok"}]}
REPO = Path(__file__).resolve().parent.parent

# The files whose tests take longest together, longest first (on a 2-core machine): they run
# first, the rest after them as collected. pytest-xdist hands out whole files in this order
# (pyproject.toml), and a long file handed out last would run alone at the end, as the
# commands' unit tests (8 s) did behind the e2e modules.
LONGEST_FIRST = (
    "tests/vscode/test_extension.py",
    "tests/e2e/test_remote.py",
    "tests/e2e/test_daemon_lifecycle.py",
    "tests/e2e/test_interactive.py",
    "tests/e2e/test_command_ownership.py",
    "tests/e2e/test_cli_first_contact.py",
    "tests/e2e/test_typescript_client.py",
    "tests/unit/test_tools_commands.py",
    "tests/e2e/test_jupyter.py",
    "tests/unit/test_lsp_pool.py",
    "tests/unit/test_images.py",
    "tests/unit/test_procs.py",
    "tests/unit/test_fuzz_wire.py",
    "tests/unit/test_mcp_sdk.py",
    "tests/unit/test_acp_updates.py",
    "tests/unit/test_mcp_pool.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Cache the bytecode of tether and of the packages its daemon and CLI import, before the
    suite starts its hundreds of daemons and CLIs: where PYTHONDONTWRITEBYTECODE is set (and
    uv installs without compiling), each of them would otherwise compile every module it
    imports again, 0.65 s instead of 0.23 s to a daemon's discovery file. Done once, by the
    process that starts pytest-xdist's workers (or the only one).

    In every process, pytest may then cache the test modules it rewrites for their asserts:
    pytest honours PYTHONDONTWRITEBYTECODE too, and would rewrite each of them again in each
    worker, 3 s of CPU per worker at every run.

    And every process takes back SIGINT and SIGQUIT where it was started with them ignored,
    as a shell without job control starts a command put in the background (`pytest &`): the
    CLIs the tests start would inherit that, and the tests of Ctrl-C need the disposition a
    program started from a terminal gets.

    hypothesis keeps its caches (a Unicode table, constants it mines from the code) in
    `.hypothesis/` of the folder pytest runs in: they go to the temporary folder instead, as
    nothing the suite writes belongs in the checkout (the examples database is off).

    No process of the suite has a graphical session (DISPLAY, WAYLAND_DISPLAY): a daemon's
    turn that nobody watches would otherwise pop up a desktop notification (notify-send,
    tether's default where it can) on the machine running the tests."""
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / f"tether-tests-hypothesis-{os.getuid()}")
    for variable in ("DISPLAY", "WAYLAND_DISPLAY"):
        os.environ.pop(variable, None)
    sys.dont_write_bytecode = False
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    if hasattr(config, "workerinput"):
        return
    importlib.import_module("tether.clients.cli.main")
    importlib.import_module("tether.daemon.server.daemon")

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    folders = {REPO / "protocol", REPO / "daemon", REPO / "clients"}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file is None:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(site):
            top = site / path.relative_to(site).parts[0]
            folders.add(top if top.is_dir() else path)
    for folder in sorted(folders):
        if folder.is_dir():
            compileall.compile_dir(folder, quiet=1)
        else:
            compileall.compile_file(folder, quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the files of `LONGEST_FIRST` first, in its order; each file's tests stay together
    and in their order (the sort is stable)."""
    rank = {REPO / name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


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
        shared.cancel_turns()
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
