"""`tether --remote [user@]host[:path] COMMAND ...`: a command on a workspace of another machine.

Most commands run here, against the remote daemon brought here by `tether.clients.core.remote`
(one ssh master, a port forward): rendering, the terminal, piped stdin and Ctrl-C are this
machine's, exactly as with a local daemon. `daemon ...` and `doctor` act on the remote
machine's own files (its lock, its database), so they run there as a whole, over one ssh.
`demo`, `dev` and `acp` are about this machine and refuse `--remote`.

How the remote shell runs tether: `--remote-command`, else `TETHER_REMOTE_COMMAND`, else
`remote_command` in the user's config file, else `tether`. It is shell text, inserted as it is
(`~/.local/bin/tether`, `env TETHER_LSP=off tether`); how ssh is run: `TETHER_SSH_COMMAND`
(`ssh -F FILE`), else `ssh`.
"""

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from tether.clients.cli.args import VALUED_OPTIONS, command_word
from tether.clients.cli.exit_codes import EXIT_USAGE, CliError
from tether.clients.core.discovery import forget_remote, reach_remotely
from tether.clients.core.remote import (
    RemoteDaemon,
    RemoteTarget,
    RemoteUnavailable,
    explain,
    parse_target,
)
from tether.clients.core.ssh import (
    ONE_SESSION,
    RemoteFailed,
    SshError,
    SshUnreachable,
    last_line,
    ssh_command_from,
)
from tether.protocol.places import config_dir

RUN_THERE = frozenset({"daemon"})
"""Command modules whose commands run on the remote machine as a whole."""
HERE_ONLY = frozenset({"scripted_model", "acp"})
"""Command modules that are about this machine."""


def reach(args: argparse.Namespace, argv: Sequence[str], stack: contextlib.ExitStack) -> int | None:
    """Make the command of `args` act on the remote workspace `args.remote` names: the exit
    code when it ran there as a whole, else None once `args` names the remote workspace and
    its daemon is reachable here (until `stack` closes). Raises `CliError` or
    `RemoteUnavailable`."""
    if getattr(args, "workspace", None):
        raise CliError(
            "with --remote, name the workspace as HOST:PATH, not --workspace", EXIT_USAGE
        )
    try:
        target = parse_target(args.remote)
    except ValueError as exc:
        raise CliError(f"--remote: {exc}", EXIT_USAGE) from exc
    module = args.handler.partition(".")[0]
    if module in HERE_ONLY:
        raise CliError(
            f"`tether {command_word(argv)}` runs on this machine; --remote does not apply",
            EXIT_USAGE,
        )
    remote_command = remote_command_of(args)
    ssh = ssh_command_from(os.environ)
    if module in RUN_THERE:
        return run_there(target, remote_command, ssh, argv)
    daemon = RemoteDaemon(target, remote_command=remote_command, ssh_command=ssh)
    stack.callback(daemon.close)
    root = daemon.connect()
    reach_remotely(Path(root), daemon)
    stack.callback(forget_remote, Path(root))
    args.workspace = root
    args.remote_root = True
    return None


def run_there(
    target: RemoteTarget, remote_command: str, ssh: Sequence[str], argv: Sequence[str]
) -> int:
    """Run the command `argv` names (its global options left out) on `target` with its
    output here; its exit code."""
    words = subcommand_words(argv)
    if target.path is not None:
        words = [*words, "--workspace", target.path]
    line = " ".join([remote_command, *(shlex.quote(w) for w in words)])
    try:
        done = subprocess.run(
            [*ssh, *ONE_SESSION, target.destination, "--", line],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CliError(f"{ssh[0]} is not installed on this machine", EXIT_USAGE) from exc
    said = done.stderr.decode(errors="replace")
    failure: SshError | None = None
    if done.returncode == 255:
        failure = SshUnreachable(
            f"cannot reach {target.destination} over ssh: {last_line(said) or 'failed'}"
        )
    elif done.returncode in (126, 127):
        failure = RemoteFailed("", done.returncode, last_line(said))
    if failure is not None:
        raise RemoteUnavailable(explain(failure, remote_command, target.destination))
    sys.stderr.write(said)
    return done.returncode


def subcommand_words(argv: Sequence[str]) -> list[str]:
    """`argv` from the subcommand on (the options before it are this machine's)."""
    words = list(argv)
    index = 0
    while index < len(words):
        word = words[index]
        if word in VALUED_OPTIONS:
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            return words[index:]
    return []


def remote_command_of(args: argparse.Namespace) -> str:
    """How the remote shell runs tether (see the module docstring)."""
    given: str | None = args.remote_command or os.environ.get("TETHER_REMOTE_COMMAND")
    return given or _configured() or "tether"


def _configured() -> str:
    """`remote_command` in the user's config file, or ""."""
    path = config_dir() / "config.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read it: {exc}") from exc
    try:
        value = tomllib.loads(text).get("remote_command", "")
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path}: {exc}") from exc
    if not isinstance(value, str):
        raise CliError(f"{path}: remote_command must be a string")
    return value
