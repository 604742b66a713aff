"""Where a workspace's daemon and its clients meet on disk, and where the daemon keeps its
data: the runtime dir holding the discovery files, the data dir holding each workspace's
database and the lock beside it, the config and state dirs, the daemon's log and the file its
stderr goes to. `HOME` and `XDG_*` relocate all of it.

The lock is what makes a daemon the workspace's one daemon, so it lives beside the data it
guards, in a folder every shell of the user computes alike. The runtime dir is not: whether
`XDG_RUNTIME_DIR` is set (`sudo -E`, `env -u`, cron, an editor started from a desktop entry)
or `/run/user/UID` exists changes it. A daemon records its discovery file's path in the lock,
so a client whose runtime dir differs still finds the running daemon
(`tether.clients.core.discovery`).
Which runtime dir is usable is decided by one rule, `runtime_dir`, for the daemon and its
clients alike; neither ever creates or repairs `/run/user/UID` or a folder above it.

Both sides must compute the same paths, so both take them from here, the protocol, which the
daemon and every client stand on. It imports nothing of tether but
`tether.protocol.workspace_files`, which names the files, and no msgspec: a client that has
to start the daemon gets here before it imports anything heavy.

On Linux the folders follow the XDG Base Directory rules directly, as platformdirs resolves
them, without importing platformdirs: every `tether` command computes the runtime dir before
anything else, and that import (with the tempfile, shutil and random it pulls in) was a third
of a warm `tether run`'s start. Elsewhere platformdirs answers, imported only there: it is
the one import of the protocol beyond the standard library and msgspec, a dependency of the
tether package that Linux never loads.
"""

import contextlib
import os
import stat
import sys
from pathlib import Path

from tether.protocol.workspace_files import LOCK_NAME, discovery_name, workspace_key

APP = "tether"

_XDG = sys.platform.startswith("linux")
_PRIVATE = 0o700


def runtime_dir() -> Path:
    """`$XDG_RUNTIME_DIR/tether` when that folder is fit for secrets (see `_fit_runtime_base`),
    else `/run/user/<uid>/tether` when that is, else `$TMPDIR/runtime-<uid>/tether` (created
    owner-only). Raises PermissionError when even that last one is another user's."""
    if not _XDG:
        return _platform_dir("runtime")
    uid = os.geteuid()
    for base in (os.environ.get("XDG_RUNTIME_DIR", ""), f"/run/user/{uid}"):
        if os.path.isabs(base) and _fit_runtime_base(base, uid):
            return Path(base) / APP
    return _temp_runtime_base(uid) / APP


def data_dir() -> Path:
    return _user_dir("XDG_DATA_HOME", ".local/share") if _XDG else _platform_dir("data")


def config_dir() -> Path:
    return _user_dir("XDG_CONFIG_HOME", ".config") if _XDG else _platform_dir("config")


def state_dir() -> Path:
    return _user_dir("XDG_STATE_HOME", ".local/state") if _XDG else _platform_dir("state")


def log_dir() -> Path:
    return state_dir() / "log" if _XDG else _platform_dir("log")


def recent_workspaces_path() -> Path:
    """The workspaces daemons have served here, newest first (`tether.protocol.discovery.
    RecentWorkspaces`, owner-only): written by each daemon as it starts serving, read by
    `tether web` to offer the ones not running."""
    return state_dir() / "recent-workspaces.json"


def discovery_path(workspace: str | Path) -> Path:
    return runtime_dir() / discovery_name(str(workspace))


def workspace_data_dir(workspace: str | Path) -> Path:
    """The workspace's own folder in the data dir: its session database and its lock."""
    return data_dir() / "workspaces" / workspace_key(str(workspace))


def lock_path(workspace: str | Path) -> Path:
    """The workspace's lock: whoever holds it is the workspace's daemon (see
    `tether.protocol.discovery`)."""
    return workspace_data_dir(workspace) / LOCK_NAME


def former_lock_path(workspace: str | Path) -> Path:
    """Where a daemon of an earlier tether holds its lock: in the runtime dir, beside its
    discovery file. Such a daemon may still run after an upgrade; clients find it there, and
    a new daemon does not start beside it on the same database."""
    return runtime_dir() / f"daemon-{workspace_key(str(workspace))}.lock"


def log_path(workspace: str | Path) -> Path:
    """The daemon's log for `workspace`: JSON lines, rotated to `.log.1`, `.log.2`, ...
    (see docs/logs.md; `tether daemon logs` reads them)."""
    return log_dir() / f"daemon-{workspace_key(str(workspace))}.log"


def stderr_path(workspace: str | Path) -> Path:
    """Where the stderr of a daemon a client started goes: its refusals to start, and a
    crash's traceback (clients quote it when the daemon fails them)."""
    return log_dir() / f"daemon-{workspace_key(str(workspace))}.stderr"


def _user_dir(variable: str, default: str) -> Path:
    """`$VARIABLE/tether` when the variable holds an absolute path (the spec says to ignore a
    relative one), else `~/DEFAULT/tether`."""
    value = os.environ.get(variable, "")
    base = Path(value) if os.path.isabs(value) else _home() / default
    return base / APP


def _home() -> Path:
    # A relative HOME is no home; the password database's entry is.
    home = os.environ.get("HOME", "")
    if not os.path.isabs(home):
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return Path(home)


def _fit_runtime_base(path: str, uid: int) -> bool:
    """Whether `path` may hold the discovery file's token: a real folder (not a symlink) that
    `uid` owns with mode 0700, below folders no other user can swap out. This is what the XDG
    spec asks of `XDG_RUNTIME_DIR`; a folder that fails it is passed over, not repaired."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        return False
    return stat.S_IMODE(info.st_mode) == _PRIVATE and _safe_ancestors(Path(path), uid)


def _safe_ancestors(path: Path, uid: int) -> bool:
    """Every folder above `path` is root's or `uid`'s, and one others may write to is sticky
    (as /tmp is), so nobody else can rename `path` away and put their own in its place."""
    for parent in path.parents:
        try:
            info = os.lstat(parent)
        except OSError:
            return False
        if info.st_uid not in (0, uid):
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return False
    return True


def _temp_runtime_base(uid: int) -> Path:
    """`runtime-<uid>` in `$TMPDIR` (or /tmp), created 0700 and tightened to it if an earlier
    run left it wider; PermissionError when it is not a folder of this user's."""
    temp = os.environ.get("TMPDIR", "")
    path = Path(temp if os.path.isabs(temp) else "/tmp") / f"runtime-{uid}"
    if not _safe_ancestors(path, uid):
        raise PermissionError(
            f"runtime directory {path} is below a folder others can replace; set XDG_RUNTIME_DIR"
        )
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=_PRIVATE)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise PermissionError(
            f"runtime directory {path} is not a folder of uid {uid}; set XDG_RUNTIME_DIR"
        )
    if stat.S_IMODE(info.st_mode) != _PRIVATE:
        path.chmod(_PRIVATE)
    return path


def _platform_dir(kind: str) -> Path:
    import warnings

    import platformdirs

    dirs = {
        "runtime": platformdirs.user_runtime_dir,
        "data": platformdirs.user_data_dir,
        "config": platformdirs.user_config_dir,
        "state": platformdirs.user_state_dir,
        "log": platformdirs.user_log_dir,
    }
    # Without a usable runtime dir platformdirs falls back to a temporary folder and warns;
    # daemon and clients make the same choice, so it is only noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Path(dirs[kind](APP))
