"""The command sandbox: a command's shell run under bubblewrap (`bwrap`), the workspace
writable, the rest of the file system read-only, `/tmp` and `/run` private, the user's
credentials and sockets and tether's own secrets hidden, the network off unless allowed (and
then a network of its own, which does not reach the host's loopback).

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
    --unshare-net                           a network namespace with only its own loopback:
                                            no route out, 127.0.0.1 is not the host's, and
                                            the host's abstract Unix sockets are out of
                                            reach. With the network allowed the namespace is
                                            made by the launcher instead (below).
    --cap-drop ALL                          run by root, bwrap keeps every capability, and a
                                            command could remount `/` writable.
    --ro-bind / /  --dev /dev  --proc /proc everything read-only; a minimal /dev; a /proc of
                                            the sandbox's own processes.
    --tmpfs /tmp  --tmpfs /run              an empty /tmp (TMPDIR points there) and /run that
                                            vanish with the command. Both are where the
                                            user's sockets live (the session bus and every
                                            runtime folder under /run/user, /run/dbus, docker's
                                            and podman's sockets, X11's, ssh-agent's, tmux's):
                                            a read-only file system still lets a command
                                            connect() to a socket, so only a socket it cannot
                                            see is out of reach.
    --bind WORKSPACE WORKSPACE              the workspace writable (`.git` in it too), then
                                            the extra writable folders the user named.
    --tmpfs HIDDEN / --ro-bind /dev/null H  the user's credentials (~/.ssh, ~/.aws, ...) and
                                            the sockets and runtime folders outside /run and
                                            /tmp: a folder is replaced by an empty one, a file
                                            or socket by an empty character device.
    --tmpfs PRIVATE / --ro-bind /dev/null P tether's own secrets, hidden last so nothing the
                                            user shows again uncovers them: the settings
                                            (API keys), the data and state folders (every
                                            session, the MCP approvals), the runtime folder
                                            (the discovery files with the daemon's token), a
                                            token file. With them a command could reach the
                                            daemon's API, approve an MCP server and run as the
                                            user outside the sandbox.
    --ro-bind SHOWN SHOWN                   what the user lets commands read inside a hidden
                                            place (`sandbox_allow_read`), and tether's skills.

With the network allowed the sandbox does not share the host's network namespace: that would
let a command reach everything listening on the host's 127.0.0.1 (the daemon's port among
them) and its abstract Unix sockets, which are named per network namespace, not by files.
It gets a namespace of its own (`unshare --user --net`, made before bwrap so the launcher can
reach it) connected to the outside by slirp4netns with `--disable-host-loopback`: outbound
connections go out through the host, nothing reaches the host's loopback, and DNS goes to
slirp4netns' forwarder (10.0.2.3). A small `/bin/sh` launcher (`LAUNCHER`) makes the
namespace, starts slirp4netns into it, lets the command start only once the interface is up
and ends slirp4netns when bwrap exits (its exit pipe closes with the launcher). Without
slirp4netns and `unshare` the sandbox with network is not made: `SandboxUnavailable`.

No `--new-session`: the command must stay in the process group the daemon records and stops,
and it has no controlling terminal to inject input into (the daemon starts it in a session of
its own, stdin from /dev/null).

The sandbox is checked before a command runs (`check`): bwrap missing, or unable to make a
sandbox (user namespaces disabled), raises `SandboxUnavailable` and nothing runs. A working
sandbox is remembered; a failing one is tried again at the next command, so a fix (installing
bubblewrap) applies at once.
"""

import fnmatch
import os
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


SOCKET_VARIABLES = (
    "*_SOCK",
    "*_SOCKET",
    "DBUS_*",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "GPG_AGENT_INFO",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "TMUX",
    "TMUX_PANE",
    "STY",
)
"""Environment variables (matched upper-cased) that name a socket or a display the sandbox
hides: a command does not get them, so no tool goes looking (ssh-agent, the session bus,
docker, X11 and Wayland, tmux, screen). One whose value names a place the user shows again
(`Sandbox.shown`) is kept."""

SHOWN_AGAIN = ("/run/current-system", "/run/booted-system", "/run/opengl-driver")
"""What /run holds that is no socket and that a system needs to run programs at all (NixOS:
the system profile on PATH, the graphics drivers): shown again over the empty /run."""

SLIRP_DNS = "10.0.2.3"
"""slirp4netns' DNS forwarder: it sends queries to the host's own resolvers (even one on the
host's loopback, which the sandbox cannot reach itself)."""

LAUNCHER = r"""
slirp=$1 unshare=$2 uid=$3 gid=$4 resolv=$5
shift 5
exec 9<&0
dir=$(mktemp -d) && mkfifo "$dir/up" "$dir/go" "$dir/exit" || exit 125
"$unshare" --user --map-user="$uid" --map-group="$gid" --net -- /bin/sh -c \
  'echo >&3; exec 3>&-; read -r go <&4 && [ "$go" = go ] && exec 4<&- "$@"; exit 125' sh "$@" \
  0<&9 9<&- 3>"$dir/up" 4<"$dir/go" 5<<EOF &
$resolv
EOF
box=$!
exec 6<"$dir/up" 5>"$dir/go"
read -r _ <&6
"$slirp" --configure --mtu=65520 --disable-host-loopback --userns-path="/proc/$box/ns/user" \
  --ready-fd=3 --exit-fd=4 "$box" tap0 3>"$dir/up" 4<"$dir/exit" 5>&- 6<&- 9<&- >/dev/null 2>&1 &
net=$!
exec 6<&- 7<"$dir/up" 8>"$dir/exit" 9<&-
rm -rf "$dir"
read -r up <&7
exec 7<&-
if [ "$up" = 1 ]; then
  echo go >&5
else
  echo "slirp4netns could not connect the sandbox to the network (it needs /dev/net/tun)" >&2
fi
exec 5>&-
wait "$box"
code=$?
kill -KILL "$net" 2>/dev/null
wait "$net" 2>/dev/null
exit "$code"
"""
"""Run bwrap (the arguments after the first five) in a user and network namespace of its
own connected by slirp4netns. In order: the namespace is made by `unshare`, whose shell says
so on `up` and waits on `go`; slirp4netns joins it, brings `tap0` up and says so on `up`;
the launcher says `go` and the shell becomes bwrap (or exits 125 when slirp4netns failed:
nothing runs without its network). The FIFOs live in a private temporary folder removed as
soon as they are open. Once bwrap has exited the launcher kills slirp4netns and waits for
it (no process of the command's outlives its result; closing `exit` alone takes slirp4netns
some 20 ms to notice); a launcher that is killed closes `exit`, which ends slirp4netns too.
`resolv` becomes the sandbox's /etc/resolv.conf (bwrap reads it from fd 5). `exit 125` is
what `env` returns when it cannot run its command."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How commands are confined. Hashable: a sandbox that worked once is remembered.

    Paths are used as given (callers resolve them); those that do not exist are left out."""

    workspace: Path
    """Writable, with everything in it (resolved)."""
    program: str = "bwrap"
    """bubblewrap: a name looked up on PATH, or a path."""
    network: bool = False
    writable: tuple[Path, ...] = ()
    """More folders a command may write to."""
    hidden: tuple[Path, ...] = ()
    """Folders a command sees empty and files it sees as an empty device (the user's
    credentials and sockets)."""
    private: tuple[Path, ...] = ()
    """tether's own secrets, hidden as `hidden` is but after `shown`: nothing uncovers them."""
    shown: tuple[Path, ...] = ()
    """Read-only again where it is inside a hidden place, /tmp or /run (elsewhere it is
    readable anyway); not when it holds a writable folder, which it would make read-only."""
    slirp4netns: str = "slirp4netns"
    """What connects a sandbox with network (see `LAUNCHER`): a name on PATH, or a path."""
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

    def network_helpers(self) -> tuple[str, str]:
        """slirp4netns and unshare, resolved; `SandboxUnavailable` when one is missing."""
        slirp = shutil.which(self.slirp4netns)
        unshare = shutil.which("unshare")
        if slirp is None or unshare is None:
            missing = f"slirp4netns ({self.slirp4netns})" if slirp is None else "unshare"
            raise SandboxUnavailable(
                f"sandbox_network = true in {self.config_file} gives sandboxed commands a "
                f"network of their own through slirp4netns, but {missing} is not installed, "
                "so commands do not run (sharing the host's network would let them reach "
                "the daemon and every service on 127.0.0.1): install it (`apt install "
                "slirp4netns`, `dnf install slirp4netns`, `pacman -S slirp4netns`), or set "
                "sandbox_network = false"
            )
        return slirp, unshare

    def argv(self, shell_argv: Sequence[str], cwd: Path) -> list[str]:
        """`shell_argv` (`shell -c COMMAND`) run in the sandbox from `cwd`. Raises
        `SandboxUnavailable` when bwrap (or, with the network, slirp4netns) is not installed
        (it is not run: see `check`)."""
        env = shutil.which("env") or "/usr/bin/env"
        # An asynchronous command's stdin is /dev/null unless redirected: the shell's own is
        # kept on fd 3 for it.
        init = (
            f'exec 3<&0; {shlex.quote(env)} --default-signal=TERM,INT,QUIT "$@" <&3 3<&- & wait $!'
        )
        bwrap = [
            self.bwrap(),
            "--die-with-parent",
            "--unshare-pid",
            "--as-pid-1",
            "--unshare-ipc",
            *([] if self.network else ["--unshare-net"]),
            "--cap-drop",
            "ALL",
            *self.mounts(),
            "--chdir",
            str(cwd),
            "--",
            "/bin/sh",
            "-c",
            init,
            "sh",
            *shell_argv,
        ]
        if not self.network:
            return [env, "--ignore-signal=TERM", *bwrap]
        slirp, unshare = self.network_helpers()
        ids = [str(os.getuid()), str(os.getgid())]
        resolv = resolv_conf()
        return [env, "--ignore-signal=TERM", "/bin/sh", "-c", LAUNCHER, "launcher", slirp,
                unshare, *ids, resolv, *bwrap]  # fmt: skip

    def mounts(self) -> list[str]:
        """bwrap's mount arguments, in the order they must be made (a later one covers an
        earlier one)."""
        mounts = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        mounts += ["--tmpfs", "/tmp", "--tmpfs", "/run"]
        for kept in SHOWN_AGAIN:
            if os.path.exists(kept):
                mounts += ["--ro-bind", kept, kept]
        writable = [folder for folder in (self.workspace, *self.writable) if folder.is_dir()]
        for folder in writable:
            mounts += ["--bind", str(folder), str(folder)]
        if self.network:
            resolv = os.path.realpath("/etc/resolv.conf")
            mounts += ["--perms", "0644", "--ro-bind-data", "5", resolv]
        for path in (*self.hidden, *self.private):
            mounts += _hide(path, writable)
        # A writable folder inside a hidden one (a workspace under ~/.config) is itself again.
        for folder in writable:
            if any(folder.is_relative_to(p) and folder != p for p in (*self.hidden, *self.private)):
                mounts += ["--bind", str(folder), str(folder)]
        covered = (*self.hidden, *self.private, Path("/tmp"), Path("/run"))
        for path in self.shown:
            if (
                path.exists()
                and any(path.is_relative_to(place) for place in covered)
                and not any(w.is_relative_to(path) for w in writable)
            ):
                mounts += ["--ro-bind", str(path), str(path)]
        # Shown places must not uncover tether's secrets: hidden again, last.
        for path in self.private:
            if any(path.is_relative_to(shown) for shown in self.shown):
                mounts += _hide(path, writable)
        return mounts

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A command's environment in the sandbox: its temporary files go to the private
        /tmp (a TMPDIR elsewhere is read-only there); variables naming a hidden socket or
        display are left out (`SOCKET_VARIABLES`)."""
        kept = {name: value for name, value in env.items() if self._keeps_variable(name, value)}
        return {**kept, "TMPDIR": "/tmp"}

    def _keeps_variable(self, name: str, value: str) -> bool:
        upper = name.upper()
        if not any(fnmatch.fnmatchcase(upper, pattern) for pattern in SOCKET_VARIABLES):
            return True
        if upper == "DISPLAY":
            named = "/tmp/.X11-unix"
        elif upper == "WAYLAND_DISPLAY":
            named = os.path.join(env_runtime_dir(), value)
        else:
            named = value
        return any(str(shown) in named for shown in self.shown)

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


def _hide(path: Path, writable: Sequence[Path]) -> list[str]:
    """bwrap's arguments hiding `path`: an empty folder over a folder, an empty device over
    anything else; nothing for a path that does not exist or that the empty /tmp and /run
    already hide (unless a writable folder there holds it)."""
    try:
        if not path.exists():
            return []
        is_dir = path.is_dir()
    except OSError:
        return []
    if any(path.is_relative_to(empty) for empty in ("/tmp", "/run")) and not any(
        path.is_relative_to(w) for w in writable
    ):
        return []
    if is_dir:
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def env_runtime_dir() -> str:
    """The user's runtime folder as the environment names it (where Wayland's socket is)."""
    return os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")


def resolv_conf() -> str:
    """The sandbox's /etc/resolv.conf with the network allowed: slirp4netns' forwarder as its
    only name server (the host's may be on the host's loopback, out of reach), the host's
    search domains and options kept."""
    lines = [f"nameserver {SLIRP_DNS}"]
    try:
        text = Path("/etc/resolv.conf").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    lines += [line for line in text.splitlines() if line.split()[:1] in (["search"], ["options"])]
    return "\n".join(lines)


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
