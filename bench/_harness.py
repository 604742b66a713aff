"""Shared helpers for tether's benchmarks: the test suite's isolated home and daemon subprocess
(`tests.support`) with a workspace and a bytecode cache, the CLI as a measured subprocess, RSS
readings from /proc, and a little statistics.

Everything here starts processes only through context managers that stop them again, also when
the benchmark fails or is interrupted (SIGTERM is turned into an exception by
`handle_sigterm()`, so `finally` blocks run). Only 127.0.0.1 is used.
"""

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from tether.clients.core.websocket import WebSocket
from tether.testing import ModelServer

# The isolated home and the daemon subprocess are the test suite's own (tests/support.py); the
# repository root is on the path for that when a script runs as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import DaemonProcess, Home
from tests.support import start_daemon as start_test_daemon

DAEMON_START_TIMEOUT = 20.0


# --------------------------------------------------------------------------------------------
# Signals


def runs_argument(doc: str | None, default: int, what: str = "measured runs") -> int:
    """The `--runs N` of a benchmark whose only option it is (its module docstring is the
    help), once SIGTERM is handled (see `handle_sigterm`)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=default, help=f"{what} (default {default})")
    runs: int = parser.parse_args().runs
    handle_sigterm()
    return runs


def handle_sigterm() -> None:
    """Turn SIGTERM into SystemExit so every `finally` (process cleanup) runs."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


# --------------------------------------------------------------------------------------------
# An isolated home and the daemon: the test suite's, with a workspace and a bytecode cache


class BenchHome(Home):
    """The tests' isolated home (`tests.support.Home`), plus a small workspace inside it and a
    bytecode cache of its own."""

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__(root, model_url, language_servers=True)
        os.chmod(self.runtime, 0o700)
        for name in ("home", "data", "config", "state", "cache"):
            (root / name).mkdir(exist_ok=True)
        self.workspace = (root / "project").resolve()
        self.workspace.mkdir(exist_ok=True)
        (self.workspace / "README.md").write_text("# Demo project\nIt greets.\n")
        (self.workspace / "src").mkdir(exist_ok=True)
        (self.workspace / "src" / "app.py").write_text(
            "def greet(name):\n    return f'hello {name}'\n"
        )
        (self.workspace / "x.txt").write_text("x\n")
        # Bytecode goes to a cache inside this temporary home: the first start compiles,
        # later ones load .pyc files, as in a normal install. The repository and the venv
        # are never written to (and PYTHONDONTWRITEBYTECODE, if set, would hide this).
        self.env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def env_without_bytecode(self) -> dict[str, str]:
        """The environment as installed, writing no bytecode: only __pycache__ folders that
        already exist are used, everything else is compiled from source at every start (this
        is what PYTHONDONTWRITEBYTECODE=1 with a venv that has no .pyc files gives)."""
        env = {**self.env, "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTHONPYCACHEPREFIX", None)
        return env


@contextlib.contextmanager
def bench_home(model_url: str, *, prime: bool = True) -> Generator[BenchHome, None, None]:
    """A temporary home, removed afterwards. With `prime`, the bytecode cache is filled for the
    daemon and the CLI first, so that no figure includes compiling them."""
    root = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    try:
        home = BenchHome(root, model_url)
        if prime:
            prime_bytecode(home)
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


def prime_bytecode(home: BenchHome) -> None:
    code = (
        "import tether.daemon.__main__, tether.daemon.server.daemon, tether.clients.cli.main,"
        " httpx, sqlite3, email.utils"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        env=home.env,
        cwd=home.workspace,
        stdin=subprocess.DEVNULL,
        check=True,
        timeout=60,
    )


@contextlib.contextmanager
def model_server(script: Mapping[str, Any]) -> Generator[ModelServer, None, None]:
    with ModelServer(script) as server:
        yield server


class DaemonProc(DaemonProcess):
    """The tests' daemon subprocess, plus what the benchmarks read of it from /proc."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kb(self) -> int:
        return proc_status_kb(self.pid, "VmRSS")

    def peak_rss_kb(self) -> int:
        return proc_status_kb(self.pid, "VmHWM")

    def threads_cpu_s(self) -> float:
        """CPU time its live threads have used so far, in seconds, to the nanosecond (each
        thread's schedstat; `cpu_s` counts clock ticks, 10 ms, ended threads included)."""
        total = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """`sig`, then SIGKILL if it has not exited within `timeout`. Idempotent."""
        try:
            return super().stop(sig, timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()


def start_daemon(home: BenchHome, *extra: str) -> DaemonProc:
    """The daemon on `home`'s workspace, never idling out, started in that workspace."""
    started = start_test_daemon(
        home,
        home.workspace,
        "--idle-timeout",
        "0",
        *extra,
        timeout=DAEMON_START_TIMEOUT,
        cwd=home.workspace,
        exec_=True,  # its own imports and memory: what the figures are of
    )
    return DaemonProc(home, home.workspace, started.proc)


@contextlib.contextmanager
def running_daemon(home: BenchHome, *extra: str) -> Generator[DaemonProc, None, None]:
    daemon = start_daemon(home, *extra)
    try:
        yield daemon
    finally:
        daemon.stop()


# --------------------------------------------------------------------------------------------
# Measured subprocesses (the CLI)


@dataclass(frozen=True)
class Measured:
    returncode: int
    wall_s: float
    max_rss_kb: int
    """Peak resident set of the child (ru_maxrss from wait4), in KiB."""
    stdout: str
    stderr: str


@contextlib.contextmanager
def installed_tether() -> Generator[Path | None, None, None]:
    """The bin folder of a temporary venv with tether installed from a copy of this checkout
    as a user installs it (`pip install .`: not editable, so no import hook of the editable
    install at each start), its bytecode compiled; None when `uv` is not on PATH. The
    repository itself is not written to (the build happens in the copy)."""
    uv = shutil.which("uv")
    if uv is None:
        yield None
        return
    repo = Path(__file__).resolve().parent.parent
    root = Path(tempfile.mkdtemp(prefix="tether-bench-install-"))
    try:
        source = root / "src"
        shutil.copytree(
            repo,
            source,
            ignore=shutil.ignore_patterns(
                ".git", ".venv", "node_modules", "build", "dist", "__pycache__", ".typecheck"
            ),
        )
        venv = root / "venv"
        python = venv / "bin" / "python"
        for argv in (
            [uv, "venv", "-q", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "-q", "--python", str(python), str(source)],
            [str(python), "-P", "-m", "compileall", "-q", str(venv / "lib")],
        ):
            subprocess.run(argv, check=True, capture_output=True, timeout=300)
        yield venv / "bin"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cli_command() -> list[str]:
    """The `tether` console script next to this Python, else `python -m` of the CLI module."""
    script = Path(sys.executable).with_name("tether")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-P", "-m", "tether.clients.cli.main"]


def run_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 30.0,
) -> Measured:
    """Run a command to completion; wall time from spawn to reap and its peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        timer = threading.Timer(timeout, _kill_if_running, args=(proc,))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
        finally:
            timer.cancel()
            if proc.returncode is None:
                proc.kill()
                proc.wait(timeout=10)
        out.seek(0)
        err.seek(0)
        return Measured(
            returncode=code,
            wall_s=wall,
            max_rss_kb=int(usage.ru_maxrss),
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
        )


def _kill_if_running(proc: "subprocess.Popen[bytes]") -> None:
    if proc.returncode is None:
        with contextlib.suppress(OSError):
            proc.kill()


def run_cli(
    home: BenchHome, *args: str, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> Measured:
    return run_measured(
        [*cli_command(), *args],
        env=home.env if env is None else env,
        cwd=home.workspace,
        timeout=timeout,
    )


# --------------------------------------------------------------------------------------------
# /proc


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (from /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def installed_bytecode(module_file: str) -> bool:
    """Whether a module's .pyc exists in its own __pycache__ folder."""
    import importlib.util

    return Path(importlib.util.cache_from_source(module_file)).exists()


def proc_status_kb(pid: int, field: str) -> int:
    """A `kB` field of /proc/PID/status (VmRSS, VmHWM, ...); 0 when unavailable."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------------------------
# Statistics and printing


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), linearly interpolated between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def verdict(value: float, target: float) -> str:
    return "ok" if value < target else "MISSED"


def row(label: str, value: str, target: str = "", note: str = "") -> None:
    line = f"  {label:<50} {value:>10}"
    if target:
        line += f"   target {target}"
    if note:
        line += f"   {note}"
    print(line)


def mb(kb: int) -> str:
    return f"{kb / 1024:.1f} MB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def machine_line() -> str:
    return (
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{os.uname().sysname} {os.uname().release}"
    )


def load_line() -> str:
    """The 1-minute load average, with a warning when other work competes for the CPUs."""
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    line = f"load average {load:.2f} on {cpus} CPUs"
    if load > cpus / 2:
        line += " - WARNING: other work on this machine inflates wall times"
    return line


def ready_messages(ws: WebSocket) -> list[bytes]:
    """Every whole message a websocket the selector found readable holds now (none when only
    part of one has come)."""
    try:
        messages = [ws.recv(timeout=0)]
    except TimeoutError:
        return []
    while ws.pending:
        messages.append(ws.recv(timeout=0))
    return messages


class StreamRun:
    """What a streaming bench (fanout, web) runs: `clients` readers of one answer streamed in
    `chunks` text chunks, `pace_ms` apart (the command line's `--clients`, `--chunks`,
    `--pace-ms`), and the model script for any pace."""

    def __init__(self, description: str | None) -> None:
        parser = argparse.ArgumentParser(
            description=description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        parser.add_argument("--clients", type=int, default=20)
        parser.add_argument("--chunks", type=int, default=2000, help="text chunks (= item_deltas)")
        parser.add_argument("--pace-ms", type=float, default=3.0, help="model delay between chunks")
        args = parser.parse_args()
        self.clients: int = args.clients
        self.chunks: int = args.chunks
        self.pace: float = args.pace_ms
        self.text = "".join(f"w{i % 10000:04d} " for i in range(self.chunks))

    def script(self, delay_ms: float) -> dict[str, object]:
        return {"steps": [{"text": self.text, "chunks": self.chunks, "chunk_delay_ms": delay_ms}]}
