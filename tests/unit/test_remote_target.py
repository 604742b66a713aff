"""What `--remote` accepts before any ssh runs: the target, where the subcommand starts, the
commands that refuse it, and how each remote failure is said."""

import os
import re
from argparse import Namespace
from pathlib import Path

import pytest

from tests.support import Home, cli
from tether.clients.cli.args import command_word
from tether.clients.cli.exit_codes import CliError
from tether.clients.cli.main import _interactive  # pyright: ignore[reportPrivateUsage]
from tether.clients.cli.remote import remote_command_of, subcommand_words
from tether.clients.core import discovery
from tether.clients.core.remote import RemoteTarget, explain, parse_target
from tether.clients.core.ssh import RemoteFailed, SshUnreachable
from tether.daemon.config.settings import load_config


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("devbox", RemoteTarget("devbox", None)),
        ("devbox:", RemoteTarget("devbox", None)),
        ("me@devbox:/srv/app", RemoteTarget("me@devbox", "/srv/app")),
        ("me@devbox:~", RemoteTarget("me@devbox", None)),
        ("me@devbox:~/app", RemoteTarget("me@devbox", "app")),
        ("devbox:src/app", RemoteTarget("devbox", "src/app")),
        ("[::1]:/srv/app", RemoteTarget("::1", "/srv/app")),
        ("me@[::1]", RemoteTarget("me@::1", None)),
        ("devbox:/srv/a@b:c", RemoteTarget("devbox", "/srv/a@b:c")),
    ],
)
def test_targets_parse(text: str, target: RemoteTarget) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize(
    "text",
    ["", ":/srv", "-oProxyCommand=touch /tmp/x", "me@", "a@b@c:/x", "dev box:/x", "[::1", "[]:/x"],
)
def test_bad_targets_are_refused(text: str) -> None:
    # A destination starting with `-` would be an option to ssh.
    with pytest.raises(ValueError, match=r"is not \[user@\]host\[:path\]"):
        parse_target(text)


def test_the_subcommand_starts_after_the_remote_options() -> None:
    argv = ["--remote", "h:/w", "--remote-command", "tether", "daemon", "status", "--json"]
    assert command_word(argv) == "daemon"
    assert subcommand_words(argv) == ["daemon", "status", "--json"]
    assert subcommand_words(["--remote=h:/w", "doctor"]) == ["doctor"]
    assert _interactive(["--remote", "h:/w"])
    assert _interactive(["--remote=h:/w", "--remote-command", "x"])
    assert not _interactive(["--remote", "h:/w", "sessions"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--remote", "h:/w", "demo"], "`tether demo` runs on this machine"),
        (["--remote", "h:/w", "dev", "model-server", "--script", "s"], "`tether dev` runs"),
        (["--remote", "h:/w", "sessions", "-w", "/tmp"], "name the workspace as HOST:PATH"),
        (["--remote=-oProxyCommand=x", "sessions"], "--remote: '-oProxyCommand=x' is not"),
    ],
)
def test_commands_that_cannot_go_remote_say_so(tmp_path: Path, args: list[str], said: str) -> None:
    done = cli(Home(tmp_path), *args)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stderr.count("\n") == 1


def test_each_remote_failure_is_named() -> None:
    def said(code: int, line: str) -> str:
        return explain(RemoteFailed("", code, line), "tether", "devbox")

    assert said(127, "bash: line 1: tether: command not found") == (
        "'tether' is not found on devbox: install tether there, or name it with"
        " --remote-command (or TETHER_REMOTE_COMMAND)"
    )
    assert said(126, "bash: tether: Permission denied") == "'tether' cannot be run on devbox"
    old = "tether daemon: error: argument action: invalid choice: 'ensure' (choose from ...)"
    assert "too old for --remote" in said(2, old)
    assert said(2, "tether: /srv/x is not a directory") == "on devbox: /srv/x is not a directory"
    unreachable = SshUnreachable("cannot reach devbox over ssh: Connection refused")
    assert explain(unreachable, "tether", "devbox") == str(unreachable)


def test_the_remote_command_comes_from_the_flag_the_environment_or_the_config(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    config = tmp_path / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    with home.activated():
        assert remote_command_of(Namespace(remote_command=None)) == "tether"
        config.write_text('remote_command = "~/.local/bin/tether"\n')
        assert remote_command_of(Namespace(remote_command=None)) == "~/.local/bin/tether"
        # The daemon reads the same file: the setting must not make it invalid there.
        assert load_config(path=config).remote_command == "~/.local/bin/tether"
        os.environ["TETHER_REMOTE_COMMAND"] = "env X=1 tether"
        assert remote_command_of(Namespace(remote_command=None)) == "env X=1 tether"
        assert remote_command_of(Namespace(remote_command="/opt/tether")) == "/opt/tether"
        del os.environ["TETHER_REMOTE_COMMAND"]
        config.write_text("remote_command = [1]\n")
        with pytest.raises(CliError, match="remote_command must be a string"):
            remote_command_of(Namespace(remote_command=None))
        config.write_text("remote_command = \n")
        with pytest.raises(CliError, match=re.escape(str(config))):
            remote_command_of(Namespace(remote_command=None))


class _Elsewhere:
    """A daemon on another machine, as far as the hint is concerned."""

    def locate(self, *, autostart: bool) -> discovery.Located:
        raise discovery.DaemonUnavailable("not reached")

    def discovery(self) -> bytes | None:
        return None


def test_a_remote_workspace_s_log_is_pointed_at_on_its_own_machine(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    assert discovery.log_hint(workspace) == f"see {discovery.log_path(workspace)}"
    discovery.reach_remotely(workspace, _Elsewhere())
    try:
        assert "`tether --remote HOST:PATH daemon logs`" in discovery.log_hint(workspace)
    finally:
        discovery.forget_remote(workspace)
