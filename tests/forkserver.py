"""The fork server behind `tests.support.start_daemon`: one process per test process that has
imported what a daemon's start imports, and forks a daemon from itself on request.

A daemon started as `python -m tether.daemon` spends most of its start (about 0.3 s of CPU
on a 2-core machine) importing trio, httpx, wsproto, msgspec and tether itself, and the suite
starts some 150 of them. A forked child has those modules already; it then runs
`tether/daemon/__main__.py` as `-P -m` would (`runpy`, as `__main__`, with the request's argv,
environment, folder and log), so everything after the imports is the daemon's own start.
The server runs as `python -P tests/forkserver.py`, so its path, and each child's, has no
folder of its own first, as the daemon's has none (`sys.flags.safe_path` is set in both).
The tests of what only a real exec shows (what the daemon imports, how a client spawns one)
start theirs without it.

Protocol, over the SOCK_SEQPACKET socket whose descriptor is argv[1], one JSON message per
packet: the test sends `{"argv", "env", "cwd"}` with the log's descriptor attached; the server
answers `{"spawned": PID}` and, when that child ends, `{"exited": PID, "code": N}` (N as
`subprocess` gives it: negative for a signal). The server exits when the test process closes
its end.
"""

import atexit
import importlib
import json
import os
import runpy
import select
import socket
import sys
import threading
import traceback
from contextlib import suppress
from typing import Any

MAX_MESSAGE = 1 << 20
PRELOADED = ("tether.daemon.__main__", "tether.daemon.server.daemon")
"""The imports a daemon's start pays, made once here: the entry point, and the server it
imports only once its arguments and lock are handled."""


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOADED:
        importlib.import_module(name)
    # What it imported stays; the entry point itself runs afresh in each child, as `-m` runs
    # it (runpy warns of a `__main__` module found already imported).
    del sys.modules["tether.daemon.__main__"]

    # A fork copies only the calling thread: a lock another thread held would stay held.
    assert threading.active_count() == 1, "the fork server must not start threads"
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([control.fileno(), *children], [], [])
        for fd in ready:
            if fd != control.fileno():
                pid = children.pop(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                _send(control, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 1)
            if not message:
                return
            request: dict[str, Any] = json.loads(message)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_daemon(request, fds[0])
            os.close(fds[0])
            children[os.pidfd_open(pid)] = pid
            _send(control, {"spawned": pid})


def _send(control: socket.socket, message: dict[str, int]) -> None:
    control.send(json.dumps(message).encode())


def _run_daemon(request: dict[str, Any], log_fd: int) -> None:
    """In the child: the state `subprocess.Popen` would give a fresh `python -P -m tether.daemon`
    (stdin from /dev/null, stdout and stderr to the log, no other descriptors, the request's
    folder and environment), then the daemon. Never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                with suppress(OSError):  # the listing's own descriptor, closed already
                    os.close(int(name))
        cwd: str = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.argv = ["", *request["argv"]]  # runpy puts the module's file first, as -m does
        try:
            runpy.run_module("tether.daemon", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage]  # as at a normal exit
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main()
