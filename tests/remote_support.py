"""A throwaway OpenSSH server on 127.0.0.1 for the remote-attach tests, and the client side
that reaches it: a generated host key, a user key authorized in a file of its own, an
`ssh_config` for the client (`ssh -F`), all in one temporary folder.

The "remote" machine is this one: the remote tether runs with a home of its own (`Home`), its
variables set on the remote command line (`remote_command`), since sshd passes no environment.
"""

import getpass
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from tests.support import Home, free_port, require_program

PRIVILEGE_SEPARATION_DIR = Path("/run/sshd")
"""Debian's sshd refuses to start without it (the package's service creates it)."""
LISTENING = "Server listening on 127.0.0.1 port"


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


class Sshd:
    """sshd on a free port of 127.0.0.1 (`-D -e`: in the foreground, its log on stderr), for
    the user running the tests, with key authentication only."""

    def __init__(self, root: Path) -> None:
        sshd = require_program("/usr/sbin/sshd", "the remote-attach tests run a real sshd")
        require_program("ssh", "tether --remote drives the ssh client")
        if os.geteuid() != 0:
            import pytest

            pytest.skip("a test sshd that logs a user in needs root")
        PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.user = getpass.getuser()
        self.destination = f"{self.user}@127.0.0.1"
        _keygen(root / "host_key")
        _keygen(root / "user_key")
        _keygen(root / "stranger_key")
        (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
        self.port = free_port()
        config = root / "sshd_config"
        config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {root / 'host_key'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
            f"PidFile {root / 'sshd.pid'}\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "AllowTcpForwarding yes\n"
            "LogLevel VERBOSE\n"
        )
        self.ssh_config = self.client_config("ssh_config", root / "user_key")
        self.log: list[str] = []
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._listening.wait(15) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError("sshd did not start: " + "".join(self.log))

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if LISTENING in line:
                self._listening.set()
        self._listening.set()  # it exited: the waiter looks at why

    def client_config(self, name: str, key: Path) -> Path:
        """An ssh_config for this server, authenticating with `key` only."""
        path = self.root / name
        path.write_text(
            "Host *\n"
            f"  Port {self.port}\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.root / 'known_hosts'}\n"
            "  StrictHostKeyChecking accept-new\n"
            "  BatchMode yes\n"
        )
        return path

    def ssh_command(self, config: Path | None = None) -> str:
        """`TETHER_SSH_COMMAND` for this server."""
        return f"ssh -F {shlex.quote(str(config or self.ssh_config))}"

    def ssh_clients(self) -> list[str]:
        """The command lines of the ssh clients that use one of this server's client configs
        (a master, a forward, a remote command), alive now."""
        found: list[str] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                words = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            line = " ".join(w.decode(errors="replace") for w in words if w)
            if line.startswith("ssh ") and str(self.root) in line:
                found.append(line)
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def remote_command(remote: Home) -> str:
    """`TETHER_REMOTE_COMMAND` running this checkout's tether as the user of `remote`."""
    names = ("HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")
    names += ("XDG_CACHE_HOME", "TETHER_LSP", "TETHER_MODEL", "TETHER_BASE_URL", "OPENAI_API_KEY")
    assignments = [
        f"{name}={shlex.quote(remote.env[name])}" for name in names if name in remote.env
    ]
    python = shlex.quote(sys.executable)
    return f"env {' '.join(assignments)} {python} -P -m tether.clients.cli.main"
