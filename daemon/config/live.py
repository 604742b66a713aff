"""The user's settings as they are now, for a running daemon: its config file read again at
every turn, and the environment of the client that asked.

Rules:
- The file is read at every call (it is small; callers read it in a worker thread) and parsed
  again only when its bytes changed, so an edit applies to the next turn. A file that became
  unreadable or invalid raises `ConfigError` at every call until it is fixed; the daemon goes
  on with nothing changed.
- A client may send its own provider variables (`PROVIDER_VARIABLES`: model, base URL,
  provider kind and API keys). Those it sends replace the daemon's own provider variables as a
  whole (one it leaves unset is unset, so the file's value applies); a client that sends none
  gets the daemon's environment, as it was when the daemon started.
- Precedence, highest first: the session's chosen model (applied by the caller), the client's
  variables, the daemon's environment (for a client that sends none), the file, the defaults.
- Some settings are read once, when the daemon starts (`RESTART_ONLY`): a change to them is
  reported by `restart_needed` and applies after a restart.
- Provider settings stay protected: they come from the user's own file and environment only,
  never from the workspace (see `tether.daemon.config.settings`).
"""

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

from tether.daemon.config.settings import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    PROVIDER_VARIABLES,
    Config,
    ConfigError,
    apply_environment,
    parse_config,
)

RESTART_ONLY = ("permissions.mode", "idle_timeout", "lsp", "log_level")
"""Settings the daemon reads when it starts: the default permission mode of sessions, how long
it waits idle, the language servers it runs, what its log keeps."""

Source = Literal["session", "client", "daemon", "file", "default"]
"""Where a setting in effect comes from: the session's own choice, the asking client's
environment, the daemon's environment, the config file, the built-in default."""


class UserSettings:
    """The user's config file and environment, read again whenever asked (thread-safe)."""

    def __init__(self, path: Path, env: Mapping[str, str]) -> None:
        self.path = path
        self.env = dict(env)
        """The daemon's own environment, from its start."""
        self._lock = threading.Lock()
        self._text: str | None = None
        self._file = Config()
        self._error: ConfigError | None = None
        self.started = self.read()
        """The settings the daemon started with (what `RESTART_ONLY` settings keep)."""

    def file(self) -> Config:
        """What the file sets now (defaults where it sets nothing). Blocking; raises
        `ConfigError` while the file is invalid."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: cannot read it: {exc}") from exc
        with self._lock:
            if text != self._text:
                self._text = text
                try:
                    self._file, self._error = parse_config(self.path, text), None
                except ConfigError as exc:
                    self._error = exc
            if self._error is not None:
                raise self._error
            return self._file

    def environment(self, client: Mapping[str, str] | None) -> dict[str, str]:
        """The environment settings are read from for a client that sent `client` (None: it
        sent nothing, the daemon's own applies)."""
        if client is None:
            return self.env
        kept = {k: v for k, v in self.env.items() if k not in PROVIDER_VARIABLES}
        return {**kept, **{k: v for k, v in client.items() if k in PROVIDER_VARIABLES}}

    def read(self, client: Mapping[str, str] | None = None) -> Config:
        """The settings in effect for a client that sent `client` (see the module rules):
        blocking, `ConfigError` when the file or a variable is invalid."""
        return apply_environment(self.file(), self.environment(client))

    def restart_needed(self, config: Config) -> list[str]:
        """The `RESTART_ONLY` settings whose value in `config` is not the one the daemon
        started with (and uses until it restarts)."""
        started, changed = self.started, list[str]()
        if config.permissions.mode != started.permissions.mode:
            changed.append("permissions.mode")
        if config.idle_timeout != started.idle_timeout:
            changed.append("idle_timeout")
        if msgspec.json.encode(config.lsp) != msgspec.json.encode(started.lsp):
            changed.append("lsp")
        if config.log_level != started.log_level:
            changed.append("log_level")
        return changed

    def sources(self, client: Mapping[str, str] | None) -> dict[str, Source]:
        """Where the model and the base URL in effect for `client` come from (`model`,
        `base_url`), before any session's choice. Blocking; `ConfigError`."""
        env = self.environment(client)
        file = self.file()
        origin: Source = "daemon" if client is None else "client"
        found: dict[str, Source] = {}
        for key, variable, default, value in (
            ("model", "TETHER_MODEL", DEFAULT_MODEL, file.provider.model),
            ("base_url", "TETHER_BASE_URL", DEFAULT_BASE_URL, file.provider.base_url),
        ):
            if env.get(variable):
                found[key] = origin
            else:
                found[key] = "default" if value == default else "file"
        return found
