"""Finding (and, when needed, starting) the daemon that serves a workspace.

The workspace is `--workspace DIR`, else the git root above the current directory, else the
current directory. A daemon is live when its discovery file names a running process; when none
is, the client starts one (`python -m tether.daemon`, detached, in its own session) and waits
for its discovery file. Two clients racing to start one are fine: the daemon's lock lets one
win and the other exits, and both clients read the winner's file.
"""

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import msgspec
import platformdirs

from tether.protocol.discovery import DiscoveryInfo, discovery_name, workspace_key

START_TIMEOUT = 15.0


class DaemonUnavailable(Exception):
    """No daemon answers and none could be started; the message says why."""


def find_workspace(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def runtime_dir() -> Path:
    # Without a usable XDG_RUNTIME_DIR platformdirs falls back to /tmp/runtime-<uid> and warns;
    # the daemon makes the same choice, so the warning is only noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Path(platformdirs.user_runtime_dir("tether"))


def discovery_path(workspace: Path) -> Path:
    return runtime_dir() / discovery_name(str(workspace))


def log_path(workspace: Path) -> Path:
    return Path(platformdirs.user_log_dir("tether")) / f"daemon-{workspace_key(str(workspace))}.log"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_discovery(workspace: Path) -> DiscoveryInfo | None:
    """The live daemon's discovery info, or None (a stale file of a dead daemon is ignored)."""
    try:
        info = msgspec.json.decode(discovery_path(workspace).read_bytes(), type=DiscoveryInfo)
    except (OSError, msgspec.DecodeError):
        return None
    return info if alive(info.pid) else None


def start_daemon(
    workspace: Path, *, idle_timeout: float | None = None, env: dict[str, str] | None = None
) -> DiscoveryInfo:
    """Start a daemon for `workspace` (or find the one that won a race) and wait until ready."""
    args = [sys.executable, "-m", "tether.daemon", "--workspace", str(workspace)]
    if idle_timeout is not None:
        args += ["--idle-timeout", str(idle_timeout)]
    log = log_path(workspace)
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open(fd, "ab") as out:
        start = out.tell()
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd=workspace,
            env=env,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        info = read_discovery(workspace)
        if info is not None:
            return info
        code = process.poll()
        if code is not None and code != 3:  # 3: another daemon won the race; keep waiting
            said = _last_words(log, start)
            raise DaemonUnavailable(
                f"the daemon for {workspace} exited with code {code}"
                + (f": {said}" if said else "")
                + f" (log: {log})"
            )
        time.sleep(0.02)
    raise DaemonUnavailable(f"the daemon for {workspace} did not start in time; see {log}")


def _last_words(log: Path, start: int) -> str:
    """The daemon's own last line in its log since `start` (what it printed when it gave up)."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("tether daemon:")]
    return (own or lines or [""])[-1].removeprefix("tether daemon: ")
