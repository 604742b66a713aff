"""A workspace's daemon on another machine, reached over ssh (`tether --remote`).

The daemon stays loopback-only there; this client brings its port here:

    1. ssh master        one handshake; its remote command is `<tether> daemon ensure --json
                         [--workspace PATH]`, which starts the workspace's daemon there when
                         none runs and prints its discovery record (pid, port, token, ...)
    2. -O forward        a free port on this machine's 127.0.0.1 to the daemon's port on the
                         remote's 127.0.0.1, through the master
    3. the command       the ordinary client, at the local port with the remote token:
                         `locate` answers with the record, its port made the local one
    4. close             the master ends, and the forward with it (see `tether.clients.core.ssh`
                         for why it cannot outlive this process)

A later `locate` (a client reconnecting: the daemon may have restarted since) runs `ensure`
again through the master, and forwards the new port if it changed.

Failures become `RemoteUnavailable` (a `DaemonUnavailable`), one line naming the cause:
ssh cannot connect or authenticate, tether is not found there, the workspace is not a folder
there, the remote tether predates `daemon ensure`.
"""

import json
import re
import shlex
from collections.abc import Sequence
from typing import NamedTuple, cast

from tether.clients.core.discovery import DaemonUnavailable, Located, NotRunning
from tether.clients.core.ssh import RemoteFailed, SshError, SshMaster

COMMAND_NOT_FOUND = 127
COMMAND_NOT_EXECUTABLE = 126


class RemoteUnavailable(DaemonUnavailable):
    """The remote daemon cannot be reached; the message says why."""


class RemoteTarget(NamedTuple):
    """Where `--remote` points: `destination` for ssh (`[user@]host`), and the workspace
    there (`path`, as given; None: the folder ssh logs in to, or the git root above it)."""

    destination: str
    path: str | None

    def __str__(self) -> str:
        return self.destination if self.path is None else f"{self.destination}:{self.path}"


def parse_target(text: str) -> RemoteTarget:
    """`[user@]host[:path]`; an IPv6 host in brackets (`[::1]:/ws`). A path not starting
    with `/` is relative to the remote login folder (`~/` is that folder). Raises
    `ValueError` saying what is wrong."""
    wrong = ValueError(f"{text!r} is not [user@]host[:path]")
    head = re.split(r"[:\[]", text, maxsplit=1)[0]
    user, at, rest = text.partition("@") if "@" in head else ("", "", text)
    if rest.startswith("["):
        host, bracket, after = rest[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise wrong
        path = after[1:]
    else:
        host, _, path = rest.partition(":")
    for part in (host, user) if at else (host,):
        if not part or part.startswith("-") or "@" in part or re.search(r"[\s\[\]]", part):
            raise wrong
    destination = f"{user}@{host}" if at else host
    if path in ("", "~"):
        return RemoteTarget(destination, None)
    return RemoteTarget(destination, path.removeprefix("~/") or None)


class RemoteDaemon:
    """The daemon of `target`'s workspace, run there by `remote_command` (a line for the
    remote shell naming tether, e.g. `tether` or `~/.local/bin/tether`) over `ssh_command`."""

    def __init__(
        self, target: RemoteTarget, *, remote_command: str, ssh_command: Sequence[str]
    ) -> None:
        self.target = target
        self.remote_command = remote_command
        self._master = SshMaster(ssh_command, target.destination)
        self._record: dict[str, object] | None = None
        """The daemon's discovery record, its port made the local one."""
        self._forwards: dict[int, int] = {}
        """Local port by remote port."""
        self._fresh = False
        """Whether `_record` was read for a `locate` that has not happened yet."""
        self._started = False

    def connect(self) -> str:
        """Start the master, the daemon there when none runs, and the forward; the
        workspace's absolute path there. Raises `RemoteUnavailable`."""
        self._ensure(autostart=True, over_new_master=True)
        self._fresh = True
        if self._record is None:
            raise RemoteUnavailable(f"the daemon for {self.target} did not start")
        return str(self._record["workspace"])

    def locate(self, *, autostart: bool) -> Located:
        """What `tether.clients.core.discovery.locate` answers for the remote workspace."""
        from tether.protocol.discovery import DiscoveryInfo

        if not self._fresh:
            self._ensure(autostart=autostart, over_new_master=False)
        self._fresh = False
        if self._record is None:
            raise NotRunning(f"no daemon is running for {self.target}")
        import msgspec

        info = msgspec.convert(self._record, DiscoveryInfo)
        return Located(info, self._started)

    def discovery(self) -> bytes | None:
        """The record as a discovery file would hold it, while a `locate` may use it as it is
        (for `tether.clients.core.prelude`)."""
        if not self._fresh or self._record is None:
            return None
        self._fresh = False  # a connection that fails goes round `locate`, which asks again
        return json.dumps(self._record).encode()

    def close(self) -> None:
        self._master.close()

    def _ensure(self, *, autostart: bool, over_new_master: bool) -> None:
        """Run `daemon ensure` there, as the command that starts the master or through the
        running one, and take its answer. Raises `RemoteUnavailable`."""
        line = f"{self.remote_command} daemon ensure --json"
        if self.target.path is not None:
            line += f" --workspace {shlex.quote(self.target.path)}"
        if not autostart:
            line += " --no-start"
        try:
            lines = (
                self._master.start(line) if over_new_master else self._master.run(line).splitlines()
            )
        except SshError as exc:
            raise self._unavailable(exc) from exc
        self._take(lines)

    def _take(self, lines: list[str]) -> None:
        """Read `ensure`'s answer (the remote shell may print lines of its own before it)
        and forward the port it names."""
        answer = _answer(lines)
        if answer is None:
            raise RemoteUnavailable(
                f"`{self.remote_command} daemon ensure` on {self.target.destination} printed"
                " no discovery record"
            )
        self._started = answer.get("started") is True
        record = _object(answer.get("discovery"))
        remote_port = None if record is None else record.get("port")
        if record is None or not isinstance(remote_port, int):
            self._record = None
            return
        local = self._forwards.get(remote_port)
        if local is None:
            try:
                local = self._master.forward(remote_port)
            except SshError as exc:
                raise self._unavailable(exc) from exc
            for old_remote, old_local in self._forwards.items():
                self._master.cancel_forward(old_local, old_remote)
            self._forwards = {remote_port: local}
        self._record = {**record, "port": local}

    def _unavailable(self, exc: SshError) -> RemoteUnavailable:
        return RemoteUnavailable(explain(exc, self.remote_command, self.target.destination))


def _object(value: object) -> dict[str, object] | None:
    return cast("dict[str, object]", value) if isinstance(value, dict) else None


def _answer(lines: list[str]) -> dict[str, object] | None:
    """The last line of `lines` that is `ensure`'s JSON answer, decoded."""
    for line in reversed(lines):
        try:
            decoded = _object(json.loads(line))
        except ValueError:
            continue
        if decoded is not None and "discovery" in decoded:
            return decoded
    return None


def explain(exc: SshError, remote_command: str, host: str) -> str:
    """What went wrong running `remote_command` (tether) on `host`, in one line."""
    if isinstance(exc, RemoteFailed):
        if exc.code == COMMAND_NOT_FOUND:
            return (
                f"{remote_command!r} is not found on {host}: install tether there, or name it"
                " with --remote-command (or TETHER_REMOTE_COMMAND)"
            )
        if exc.code == COMMAND_NOT_EXECUTABLE:
            return f"{remote_command!r} cannot be run on {host}"
        if "invalid choice: 'ensure'" in exc.said:
            return (
                f"the tether on {host} is too old for --remote (it has no `tether daemon"
                " ensure`); upgrade it there"
            )
        if exc.said:
            return f"on {host}: {exc.said.removeprefix('tether: ')}"
    return str(exc)
