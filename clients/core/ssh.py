"""One ssh connection to a host, shared by every command a client runs there, and local port
forwards through it.

The connection is an OpenSSH *master* (`-M`, its control socket in a private temporary
folder): it authenticates once, and every later `ssh` of this client (another remote command,
`-O forward`) rides on it without a handshake of its own. The master's own remote command is
the first thing the client wants run there, followed by `exec cat >/dev/null`: the command's
output comes back on the master's stdout, and afterwards the remote `cat` waits on the
master's stdin, which only this process holds. So the master lives exactly as long as this
client does, even one killed with SIGKILL: its stdin then closes, `cat` ends, the session
ends and so does the master, with its forwards. `close` ends it at once (`-O exit`).

The master ignores SIGINT (OpenSSH keeps a disposition it inherits as ignored): a Ctrl-C at
the terminal is the client's to handle (cancel a turn, leave `attach`), and must not cut the
connection it would use to do so.

Errors:

    SshError            ssh could not do what was asked; the message is one line naming why
      SshUnreachable    ssh itself failed (exit 255): no route, refused, authentication
      RemoteFailed      the remote command failed: `code` is its exit status, `said` the
                        last line it wrote on stderr
"""

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import IO

SSH_FAILED = 255
"""ssh's own exit status when it fails (as opposed to the remote command's)."""
FORWARD_ATTEMPTS = 3
"""Free local ports tried for a forward: another process may take the one picked first."""
EXIT_WAIT = 5.0
"""Seconds `close` waits for the master to exit before killing it."""


class SshError(Exception):
    """ssh could not do what was asked; the message says why, in one line."""


class SshUnreachable(SshError):
    """ssh itself failed: the host is unknown or unreachable, or authentication failed."""


class RemoteFailed(SshError):
    """The remote command exited with `code`; `said` is the last line of its stderr."""

    def __init__(self, message: str, code: int, said: str) -> None:
        super().__init__(message)
        self.code = code
        self.said = said


@contextlib.contextmanager
def _sigint_ignored() -> Generator[None]:
    """SIGINT ignored while a child is spawned, which keeps that disposition across `exec`
    (a preexec hook would do it in the child, but is unsafe in a process with threads). Off
    the main thread, where Python cannot change it, the child gets the default."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def last_line(text: str) -> str:
    """The last non-empty line of `text`, stripped (ssh ends its lines with CRLF)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class SshMaster:
    """The master connection to `destination` (`[user@]host`), made by `ssh_command` (the
    program and its options, e.g. `["ssh", "-F", "config"]`)."""

    def __init__(self, ssh_command: Sequence[str], destination: str) -> None:
        if not ssh_command:
            raise SshError("the ssh command is empty")
        self.ssh_command = list(ssh_command)
        self.destination = destination
        self._folder = Path(tempfile.mkdtemp(prefix="tether-ssh-"))
        self._control = self._folder / "control"
        self._log: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        """Whether the master is up (its command has succeeded)."""

    def _ssh(self, *options: str) -> list[str]:
        """ssh through the master (or, before it is up, as the master with `options`)."""
        return [*self.ssh_command, "-o", f"ControlPath={self._control}", *options]

    def _client(self, *options: str) -> list[str]:
        """An ssh that only asks the master (its `ControlMaster` the user's config may set
        otherwise)."""
        return self._ssh("-o", "ControlMaster=no", *options)

    def start(self, remote_command: str) -> list[str]:
        """Connect, run `remote_command` (a line for the remote login shell) as the master's
        own command and return the lines it printed; the master stays once it has ended with
        status 0. Raises `SshUnreachable`, or `RemoteFailed` with the command's status."""
        self._log = open(self._folder / "master.log", "w+b")  # noqa: SIM115 (closed by close)
        try:
            with _sigint_ignored():
                self._proc = subprocess.Popen(
                    [
                        *self._ssh("-M", "-o", "ControlPersist=no", *ONE_SESSION),
                        self.destination,
                        "--",
                        f"{remote_command} && echo {_END} && exec cat >/dev/null",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=self._log,
                )
        except FileNotFoundError as exc:
            raise SshError(f"{self.ssh_command[0]} is not installed on this machine") from exc
        assert self._proc.stdout is not None
        lines: list[str] = []
        for raw in self._proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line == _END:
                self._ready = True
                return lines
            lines.append(line)
        code = self._proc.wait()
        self._ready = False
        self._log.seek(0)
        raise self._failure(code, self._log.read().decode(errors="replace"))

    def run(self, remote_command: str) -> str:
        """Run `remote_command` through the master and return what it printed on stdout.
        Raises `SshUnreachable` or `RemoteFailed`."""
        done = subprocess.run(
            [*self._client(*ONE_SESSION), self.destination, "--", remote_command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise self._failure(done.returncode, done.stderr.decode(errors="replace"))
        return done.stdout.decode(errors="replace")

    def forward(self, remote_port: int) -> int:
        """Forward a free port on this machine's 127.0.0.1 to `remote_port` on the remote's
        127.0.0.1, through the master; the local port. The forward ends with the master."""
        said = ""
        for _ in range(FORWARD_ATTEMPTS):
            local = _free_port()
            forward = f"127.0.0.1:{local}:127.0.0.1:{remote_port}"
            done = subprocess.run(
                [*self._client("-O", "forward", "-L", forward), self.destination],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                return local
            said = last_line(done.stderr.decode(errors="replace"))
        raise SshError(f"could not forward a local port to {self.destination}: {said}")

    def cancel_forward(self, local_port: int, remote_port: int) -> None:
        """Stop a forward `forward` made (nothing happens when the master is gone)."""
        forward = f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"
        subprocess.run(
            [*self._client("-O", "cancel", "-L", forward), self.destination],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )

    def close(self) -> None:
        """End the master (and so every forward), and remove the private folder. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            if self._ready:
                subprocess.run(
                    [*self._client("-O", "exit"), self.destination],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    check=False,
                )
            else:
                proc.terminate()  # still connecting (or asking for a passphrase)
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(EXIT_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self._folder, ignore_errors=True)

    def _failure(self, code: int, stderr: str) -> SshError:
        said = last_line(stderr)
        if code == SSH_FAILED:
            return SshUnreachable(f"cannot reach {self.destination} over ssh: {said or 'failed'}")
        return RemoteFailed(f"on {self.destination}: {said or f'exit status {code}'}", code, said)


ONE_SESSION = ("-T", "-o", "RemoteCommand=none", "-o", "ClearAllForwardings=yes")
"""Options of an ssh that runs one remote command: no terminal, and none of the remote
command or forwards the user's config may give the host (a `LocalForward` that cannot bind
would fail the connection; one that can would be ours to own)."""

_END = "tether-ssh-command-done"
"""What the master's remote shell prints once its command has succeeded: the command's
output ends there (it cannot be told from the output by EOF, since the session goes on)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def ssh_command_from(environ: Mapping[str, str]) -> list[str]:
    """The ssh program and options: `TETHER_SSH_COMMAND` (split like a shell would), else
    `ssh` (which reads the user's ~/.ssh/config)."""
    import shlex

    return shlex.split(environ.get("TETHER_SSH_COMMAND", "")) or ["ssh"]
