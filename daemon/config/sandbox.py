"""The command sandbox as the user's settings describe it, for one workspace.

The settings (`sandbox`, `sandbox_network`, `sandbox_bwrap`, `sandbox_writable`,
`sandbox_allow_read`, `sandbox_hide`) come from the user's own config file only: a workspace's
`.tether/config.toml` that sets them has them ignored, with a notice
(`tether.daemon.config.settings.load_workspace_rules`), so a cloned repository can neither turn
the sandbox off, the network on, nor a credential visible.

What a sandboxed command may not read, beyond what `tether.daemon.procs.sandbox` always hides
(/tmp and /run, where sockets live):

- tether's own secrets, always (`daemon_secrets`): the settings folder (API keys), the data and
  state folders (sessions, MCP approvals), the runtime folder (the daemon's token), and every
  file the daemon was told to read a secret from (`--token-file`);
- the user's credentials (`CREDENTIALS`) and the sockets outside /run and /tmp (`SOCKETS`),
  unless the user lists them (or a folder holding them) in `sandbox_allow_read`;
- whatever the user lists in `sandbox_hide`.

`sandbox_allow_read` also shows again, read-only, a place inside a hidden one (an X11 socket
under /tmp, `~/.ssh/known_hosts`); it never uncovers tether's own secrets. The user's skills
folder, inside the settings folder, stays readable: skills name their scripts there.
"""

import os
import threading
from pathlib import Path

from tether.daemon.config import paths
from tether.daemon.config.settings import Config, config_file
from tether.daemon.procs.sandbox import Sandbox

CREDENTIALS = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/git/credentials",
    "~/.git-credentials",
    "~/.netrc",
    "~/.docker",
    "~/.kube",
    "~/.npmrc",
    "~/.yarnrc.yml",
    "~/.pypirc",
    "~/.config/pip/pip.conf",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.m2/settings.xml",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.config/op",
    "~/.1password",
    "~/.config/rclone",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.codex",
    "~/.claude",
    "~/.claude.json",
)
"""Where tools keep the user's keys, tokens, passwords and browser cookies: hidden from
sandboxed commands unless listed in `sandbox_allow_read`."""

SOCKETS = (
    "/var/run/docker.sock",
    "/var/run/dbus",
    "/var/run/podman",
    "/var/lib/lxd/unix.socket",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/mnt/wslg",
    "~/.colima",
    "~/.lima",
    "~/.rd",
    "~/.local/share/containers/podman/machine",
)
"""Sockets (and folders of sockets) outside /run and /tmp, which the sandbox empties
anyway: on most systems /var/run is a link to /run, where it is not these are real places;
the container engines that run in a virtual machine keep theirs in the home."""

_secret_files: set[Path] = set()
_secret_files_lock = threading.Lock()


def hide_daemon_secret(path: Path) -> None:
    """Say that this daemon reads a secret from `path` (its token file): no sandboxed command
    may read it from now on."""
    with _secret_files_lock:
        _secret_files.add(path.expanduser().resolve())


def daemon_secrets() -> tuple[Path, ...]:
    """What the daemon reads secrets from or keeps them in (see the module docstring)."""
    with _secret_files_lock:
        files = sorted(_secret_files)
    folders = (paths.config_dir(), paths.data_dir(), paths.state_dir(), paths.runtime_dir())
    return (*(folder.resolve() for folder in folders), *files)


def command_sandbox(config: Config, workspace: Path) -> Sandbox | None:
    """The sandbox commands run in under `config` (None: the sandbox is off)."""
    if config.sandbox == "off":
        return None
    private = daemon_secrets()
    allowed = [_path(entry) for entry in config.sandbox_allow_read]
    defaults = [_path(entry) for entry in (*CREDENTIALS, *SOCKETS)]
    hidden = [
        path
        for path in (*defaults, *runtime_folders())
        if not any(path.is_relative_to(allow) for allow in allowed)
    ]
    hidden += [_path(entry) for entry in config.sandbox_hide]
    shown = [path for path in allowed if not any(path.is_relative_to(secret) for secret in private)]
    return Sandbox(
        workspace=workspace.resolve(),
        program=config.sandbox_bwrap,
        network=config.sandbox_network,
        writable=tuple(_path(folder) for folder in config.sandbox_writable),
        hidden=tuple(dict.fromkeys(hidden)),
        private=private,
        shown=(*shown, paths.user_skills_dir().resolve()),
        config_file=str(config_file()),
    )


def runtime_folders() -> list[Path]:
    """The user's runtime folder where it is not under /run (a custom `XDG_RUNTIME_DIR`): the
    session bus, the keyring and the agents' sockets live there."""
    value = os.environ.get("XDG_RUNTIME_DIR", "")
    return [Path(value).resolve()] if os.path.isabs(value) else []


def _path(entry: str) -> Path:
    return Path(entry).expanduser().resolve()
