"""The command sandbox: a command's shell run under bubblewrap (`bwrap`), the workspace
writable, the rest of the file system read-only, `/tmp` private, the network off unless
allowed.

What the sandbox is made of, and why each part is there:

    env --ignore-signal=TERM bwrap          bwrap is the group's leader and is not a shell:
                                            left at the default action, the SIGTERM that
                                            stops a tree would kill it at once and, through
                                            --die-with-parent, SIGKILL everything inside with
                                            no grace. Ignoring it, the group's members get
                                            SIGTERM themselves, then the grace, then SIGKILL
                                            (which bwrap cannot ignore), as outside the sandbox.
    --unshare-pid --as-pid-1                commands see (and can signal or trace) only their
                                            own processes, not the daemon or the user's other
                                            programs. Pid 1 is a `/bin/sh` that starts the
                                            user's shell as its child (signals at their
                                            default again: `env --default-signal`) and waits
                                            for it; when it exits, the kernel ends the
                                            namespace, so nothing a command started, `setsid`
                                            or daemonised included, outlives it. bwrap's own
                                            pid 1 is not used: it outlives bwrap and is left
                                            as a zombie for the system's init to collect,
                                            which keeps the group in sight after the command.
    --die-with-parent                       bwrap killed (SIGKILL after the grace, or the
                                            daemon's death signal) ends the namespace too.
    --unshare-ipc                           no System V shared memory or semaphores shared
                                            with the user's other programs.
    --unshare-net (unless network)          a network namespace with only its own loopback:
                                            no route out, and 127.0.0.1 is not the host's.
    --cap-drop ALL                          run by root, bwrap keeps every capability, and a
                                            command could remount `/` writable.
    --ro-bind / /  --dev /dev  --proc /proc everything read-only; a minimal /dev; a /proc of
                                            the sandbox's own processes.
    --tmpfs /tmp                            an empty /tmp (TMPDIR points there) that vanishes
                                            with the command.
    --bind WORKSPACE WORKSPACE              the workspace writable (`.git` in it too), then
                                            the extra writable folders the user named.
    --ro-bind KEPT KEPT                     tether's own folders (settings, data, state) stay
                                            read-only when a writable folder holds them (a
                                            workspace that is the home): a command must not
                                            turn the sandbox off or approve an MCP server.
    --tmpfs HIDDEN                          folders replaced by an empty one: the runtime dir,
                                            whose discovery files hold the daemon's token (the
                                            daemon's API would be a way out).

No `--new-session`: the command must stay in the process group the daemon records and stops,
and it has no controlling terminal to inject input into (the daemon starts it in a session of
its own, stdin from /dev/null).

The sandbox is checked before a command runs (`check`): bwrap missing, or unable to make a
sandbox (user namespaces disabled), raises `SandboxUnavailable` and nothing runs. A working
sandbox is remembered; a failing one is tried again at the next command, so a fix (installing
bubblewrap) applies at once.
"""

import shlex
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT = 10.0
"""Seconds the check (`bwrap ... true`) may take."""

NETWORK_FAILURES = (
    "network is unreachable",
    "enetunreach",
    "temporary failure in name resolution",
    "could not resolve host",
    "could not resolve proxy",
    "name or service not known",
    "no address associated with hostname",
    "nodename nor servname",
    "eai_again",
    "getaddrinfo",
    "failed to establish a new connection",
    "connection refused",
    "econnrefused",
    "dial tcp",
)
"""What a failed command's output says (lower-cased) when it needed the network: the C
library's resolver and socket errors as Python, curl, git, pip, npm, Go and cargo word them.
Inside a network namespace nothing listens on 127.0.0.1, so a refused connection counts."""


class SandboxUnavailable(Exception):
    """The sandbox cannot be made (bwrap missing or failing); the message says why and what to
    do. Nothing was run."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How commands are confined. Hashable: a sandbox that worked once is remembered."""

    workspace: Path
    """Writable, with everything in it (resolved)."""
    program: str = "bwrap"
    """bubblewrap: a name looked up on PATH, or a path."""
    network: bool = False
    writable: tuple[Path, ...] = ()
    """More folders a command may write to (those that exist)."""
    kept: tuple[Path, ...] = ()
    """Folders that stay read-only inside the writable ones (those that exist)."""
    hidden: tuple[Path, ...] = ()
    """Folders a command sees empty (those that exist)."""
    config_file: str = "config.toml"
    """Where the user's settings are, named in advice."""

    def bwrap(self) -> str:
        """The bwrap that runs, resolved; `SandboxUnavailable` when there is none."""
        found = shutil.which(self.program)
        if found is None:
            raise SandboxUnavailable(
                f'the command sandbox is on (sandbox = "bwrap" in {self.config_file}) but '
                f"bubblewrap ({self.program}) is not installed, so commands do not run: install "
                "it (`apt install bubblewrap`, `dnf install bubblewrap`, `pacman -S "
                'bubblewrap`), or set sandbox = "off" to run them unconfined'
            )
        return found

    def argv(self, shell_argv: Sequence[str], cwd: Path) -> list[str]:
        """`shell_argv` (`shell -c COMMAND`) run in the sandbox from `cwd`. Raises
        `SandboxUnavailable` when bwrap is not installed (it is not run: see `check`)."""
        env = shutil.which("env") or "/usr/bin/env"
        # An asynchronous command's stdin is /dev/null unless redirected: the shell's own is
        # kept on fd 3 for it.
        init = (
            f'exec 3<&0; {shlex.quote(env)} --default-signal=TERM,INT,QUIT "$@" <&3 3<&- & wait $!'
        )
        mounts = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        writable = [folder for folder in (self.workspace, *self.writable) if folder.is_dir()]
        for folder in writable:
            mounts += ["--bind", str(folder), str(folder)]
        for folder in self.kept:
            if folder.is_dir() and any(folder.is_relative_to(w) for w in writable):
                mounts += ["--ro-bind", str(folder), str(folder)]
        for folder in self.hidden:
            if folder.is_dir() and not folder.is_relative_to("/tmp"):
                mounts += ["--tmpfs", str(folder)]
        return [
            env,
            "--ignore-signal=TERM",
            self.bwrap(),
            "--die-with-parent",
            "--unshare-pid",
            "--as-pid-1",
            "--unshare-ipc",
            *([] if self.network else ["--unshare-net"]),
            "--cap-drop",
            "ALL",
            *mounts,
            "--chdir",
            str(cwd),
            "--",
            "/bin/sh",
            "-c",
            init,
            "sh",
            *shell_argv,
        ]

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A command's environment in the sandbox: its temporary files go to the private
        /tmp (a TMPDIR elsewhere is read-only there)."""
        return {**env, "TMPDIR": "/tmp"}

    def network_advice(self, output: str) -> str:
        """For a command that failed: a line saying how to allow the network, when the sandbox
        has none and `output` reads like a network failure; else ""."""
        if self.network:
            return ""
        lowered = output.lower()
        if not any(failure in lowered for failure in NETWORK_FAILURES):
            return ""
        return (
            "The command sandbox has no network, which is likely why this failed. To allow "
            f"it, set sandbox_network = true in {self.config_file} (the user's own settings; "
            "a workspace cannot)."
        )


_working: set[Sandbox] = set()
_working_lock = threading.Lock()


def check(sandbox: Sandbox) -> None:
    """Raise `SandboxUnavailable` unless bwrap is installed and makes this sandbox (it runs
    `true` in it once; blocking, at most `PROBE_TIMEOUT` seconds). A sandbox that worked is
    not tried again."""
    with _working_lock:
        if sandbox in _working:
            return
    argv = sandbox.argv(["/bin/sh", "-c", "true"], Path("/"))
    try:
        ran = subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(_failing(sandbox, argv[2], str(exc))) from exc
    if ran.returncode != 0:
        said = ran.stderr.decode(errors="replace").strip().splitlines()
        raise SandboxUnavailable(
            _failing(sandbox, argv[2], said[-1] if said else f"exit code {ran.returncode}")
        )
    with _working_lock:
        _working.add(sandbox)


def _failing(sandbox: Sandbox, bwrap: str, why: str) -> str:
    return (
        f'the command sandbox is on (sandbox = "bwrap" in {sandbox.config_file}) but '
        f"bubblewrap ({bwrap}) cannot make one here ({why}), so commands do not run. User "
        "namespaces may be disabled: see `sysctl kernel.unprivileged_userns_clone` and, on "
        "Ubuntu 24.04, `kernel.apparmor_restrict_unprivileged_userns`; or set sandbox = "
        '"off" to run them unconfined'
    )


def sandbox_problem(sandbox: Sandbox) -> str:
    """Why commands cannot run in `sandbox` ("" when they can). Blocking, as `check`."""
    try:
        check(sandbox)
    except SandboxUnavailable as exc:
        return str(exc)
    return ""
