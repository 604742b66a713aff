"""Configuration: the user's config file, then the environment, then command-line flags.

The file is `config.toml` in the user config dir (`$XDG_CONFIG_HOME/tether/`, by default
`~/.config/tether/`).
Provider settings are protected: they come only from the user's file, the environment and
flags, never from anything inside the workspace, so a cloned repository cannot redirect the
agent to another model server or key.

The provider kind is settled first (`TETHER_PROVIDER` over the file's `kind`), then the API key
for that kind, first found wins:

    TETHER_API_KEY                          tether's own override, for any kind
    `api_key` in the file                   only when the file's `kind` is the kind in use:
                                            a key written for one provider is never sent to
                                            another because TETHER_PROVIDER switched it
    OPENAI_API_KEY / ANTHROPIC_API_KEY      the variable of the kind in use, never the other's

The vendors' variables come last because they are often set for other programs: a key written
for tether (in its file or variable) says more about this server than one found in the shell.
"""

import os
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, cast

import msgspec

from tether.daemon.config import paths
from tether.daemon.config.hooks import HookConfig
from tether.daemon.config.problems import settings_problem, syntax_problem
from tether.daemon.lsp.servers import BUILTIN_SERVERS, LspServerConfig
from tether.daemon.mcp.config import McpServerConfig
from tether.daemon.procs.shell import ShellChoice
from tether.protocol.events import PermissionMode

DEFAULT_BASE_URL = "http://127.0.0.1:11434/v1"
DEFAULT_MODEL = "qwen3-coder"


LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """The config file cannot be read; the message names the file and the problem."""


ProviderKind = Literal["openai", "anthropic"]


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kind: ProviderKind = "openai"
    """`openai`: chat completions (Ollama, vLLM, llama.cpp, …); `anthropic`: Messages."""
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: str = ""
    """Used only for this `kind` (see the module docstring for the order of keys)."""
    request_timeout: float = 300.0
    """Seconds a model stream may stay silent before it is abandoned (and retried once)."""
    tool_mode: Literal["auto", "native", "text"] = "auto"
    """`text` describes tools in the prompt and reads `<tool_call>` blocks; `auto` switches to
    it when the server says the model does not support tools."""
    max_output_tokens: int = 8192
    context_window: int = 65536
    """Tokens the model accepts; the compaction budget is derived from it."""
    images: bool | None = None
    """Whether this provider's models take images; unset: Anthropic's do, and an
    OpenAI-compatible server's do when the model's name is a known vision model's
    (`tether.daemon.config.vision`). A `[models.NAME]` table says it for one model."""


class ModelConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What the user says of one model (`[models."NAME"]`), over what tether guesses."""

    images: bool | None = None
    """Whether the model takes images (unset: as `[provider] images`, then tether's guess)."""


class PermissionsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    mode: PermissionMode = "edits"
    """`ask`: edits and commands ask; `edits`: commands ask; `auto`: nothing asks."""
    allow: list[str] = []
    ask: list[str] = []
    deny: list[str] = []
    """Rules: `tool` or `tool(pattern)`, e.g. `run_command(npm run build *)`. Deny wins."""


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    provider: ProviderConfig = msgspec.field(default_factory=ProviderConfig)
    permissions: PermissionsConfig = msgspec.field(default_factory=PermissionsConfig)
    max_steps: int = 60
    """Model calls a turn may make before it pauses."""
    subagent_model: str = ""
    """The model subagents (the `task` tool) call, on the same provider; empty: the model
    the turn calls. A session may choose its own (`session/configure`)."""
    lsp: list[LspServerConfig] = []
    """Language servers to add to (or change among) the built-in ones: `[[lsp]]` tables with
    name, command, extensions, root_markers."""
    idle_timeout: float = 900.0
    """Seconds with no client and no running turn before the daemon exits; 0 = never."""
    mcp_servers: dict[str, McpServerConfig] = msgspec.field(default_factory=dict, name="mcpServers")
    """MCP servers, by name: `[mcpServers.NAME]` tables with `command`/`args`/`env` or
    `url`/`headers` (see docs/mcp.md)."""
    diagnostics_wait: Annotated[float, msgspec.Meta(ge=0)] = 1.5
    """Seconds a step waits after an edit for the language servers' diagnostics (read at the
    daemon's start)."""
    diagnostics_first_wait: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    """Seconds a step waits instead for a language server still starting (its first analysis
    loads the project; never less than `diagnostics_wait`; read at the daemon's start)."""
    hooks: list[HookConfig] = []
    """Commands run at tool calls, turn ends and session starts: `[[hooks]]` tables with
    event, command, match, name, timeout (docs/hooks.md). Never read from a workspace."""
    # The command sandbox (docs/sandbox.md): like every setting here, never read from a
    # workspace, so a repository cannot turn it off or the network on.
    sandbox: Literal["bwrap", "off"] = "off"
    """`bwrap`: run_command's commands (background ones too) run under bubblewrap, only the
    workspace writable, /tmp private, no network; they then run without asking in mode
    `edits`. Never unconfined: without a working bwrap they do not run."""
    sandbox_network: bool = False
    """Let sandboxed commands use the network."""
    sandbox_bwrap: str = "bwrap"
    """The bubblewrap program: a name looked up on PATH, or a path."""
    sandbox_writable: list[str] = []
    """More folders sandboxed commands may write to (`~` allowed), e.g. a build cache."""
    sandbox_allow_read: list[str] = []
    """Credentials and sockets sandboxed commands may read after all (absolute, or `~`),
    e.g. `~/.ssh/known_hosts`, `~/.npmrc`; tether's own folders stay hidden
    (`tether.daemon.config.sandbox`)."""
    sandbox_hide: list[str] = []
    """More files and folders sandboxed commands may not read (absolute, or `~`)."""
    # Never read from a workspace either: the gate judges commands with bash's grammar.
    shell: ShellChoice = "bash"
    """The shell run_command's commands run in: `bash` (`/bin/sh` where there is no bash),
    the grammar the permission gate reads them with; `user`: your own `$SHELL`, and then
    every command that is more than plain words asks (see the README)."""
    remote_command: str = ""
    """How `tether --remote` runs tether on another machine (shell text; read by the CLI,
    not the daemon; docs/remote.md). Empty: `tether`."""
    log_level: LogLevel = "info"
    """What the daemon's log keeps: `debug` adds each request and model bodies (truncated),
    `warning` and `error` keep less (docs/logs.md). Read at the daemon's start."""
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    """Settings of single models, by the id turns call them by: `[models."llava:13b"]`
    tables with `images` (docs/images.md)."""
    # Notifications (docs/notifications.md): commands and a URL of the user's, never read
    # from a workspace, like hooks.
    notify: list[Annotated[str, msgspec.Meta(min_length=1)]] | None = None
    """The command (an argv list) run when a turn needs you and no client saw it: the event
    as JSON on stdin, a one-line message as its last argument. Unset: `notify-send tether`
    where notify-send is on PATH and a graphical session is open (DISPLAY or
    WAYLAND_DISPLAY), else none; `[]`: none."""
    notify_url: str = ""
    """A URL the event is POSTed to as JSON (an ntfy topic, a webhook); empty: none."""
    notify_after: Annotated[float, msgspec.Meta(ge=0, le=86400)] = 10.0
    """Seconds an event waits for a controller to see it before it is notified."""


def config_file() -> Path:
    return paths.config_dir() / "config.toml"


def load_config(env: Mapping[str, str] | None = None, path: Path | None = None) -> Config:
    """The user's settings: the file at `path` (default: `config_file()`), then `env`
    (default: this process's environment). Raises `ConfigError`."""
    return apply_environment(
        read_config_file(path or config_file()), dict(os.environ) if env is None else env
    )


def read_config_file(path: Path) -> Config:
    """The settings the file at `path` sets (defaults for the rest; all defaults when there
    is no file). Raises `ConfigError` naming the file, the line and the setting."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    return parse_config(path, text)


def parse_config(path: Path, text: str) -> Config:
    """The settings `text` (the contents of the file at `path`) sets; `ConfigError`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(syntax_problem(path, exc)) from exc
    _check_mcp_servers(path, raw.get("mcpServers"))
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(settings_problem(path, text, exc, Config)) from exc
    _check_sandbox_paths(path, config)
    _check_notify_url(path, config.notify_url)
    return config


def _check_notify_url(path: Path, url: str) -> None:
    """ConfigError for a `notify_url` that is not an http(s) URL with a host."""
    if not url:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{path}: notify_url: {url!r} is not an http:// or https:// URL with a host"
        )


def _check_sandbox_paths(path: Path, config: Config) -> None:
    """ConfigError for a relative path in the sandbox's read settings: relative to what the
    daemon's current folder happens to be, it would hide (or show) the wrong thing."""
    for setting in ("sandbox_allow_read", "sandbox_hide"):
        for entry in cast("list[str]", getattr(config, setting)):
            if not (entry.startswith("~") or os.path.isabs(entry)):
                raise ConfigError(
                    f"{path}: {setting}: {entry!r} is a relative path; write it absolute "
                    f"(/...) or from your home (~/...)"
                )


def _check_mcp_servers(path: Path, servers: object) -> None:
    """ConfigError naming the `[mcpServers.NAME]` table that is wrong (msgspec's own error
    would not name the table: it is a key of a mapping)."""
    if not isinstance(servers, dict):
        return
    for name, table in cast("dict[str, object]", servers).items():
        try:
            msgspec.convert(table, McpServerConfig)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{path}: [mcpServers.{name}]: {exc}") from exc


PROVIDER_VARIABLES = (
    "TETHER_PROVIDER",
    "TETHER_BASE_URL",
    "TETHER_MODEL",
    "TETHER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)
"""The environment variables that choose the model server: a client's own values of these
replace the daemon's (see `tether.daemon.config.live`)."""


def apply_environment(config: Config, env: Mapping[str, str]) -> Config:
    """`config` (as the file sets it) with the environment's settings over it: the provider
    variables and `TETHER_PERMISSION_MODE`. Raises `ConfigError` for a bad value."""
    provider = config.provider
    kind: ProviderKind = provider.kind
    if value := env.get("TETHER_PROVIDER"):
        if value in ("openai", "anthropic"):
            kind = value
        else:
            raise ConfigError(f"TETHER_PROVIDER must be openai or anthropic, not {value!r}")
    overrides: dict[str, str] = {"kind": kind, "api_key": _api_key(env, provider, kind)}
    if value := env.get("TETHER_BASE_URL"):
        overrides["base_url"] = value
    if value := env.get("TETHER_MODEL"):
        overrides["model"] = value
    provider = msgspec.structs.replace(provider, **overrides)
    permissions = config.permissions
    if mode := env.get("TETHER_PERMISSION_MODE"):
        if mode not in ("ask", "edits", "auto"):
            raise ConfigError(f"TETHER_PERMISSION_MODE must be ask, edits or auto, not {mode!r}")
        permissions = msgspec.structs.replace(permissions, mode=mode)
    log_level = config.log_level
    if value := env.get("TETHER_LOG_LEVEL"):
        if value.lower() not in LOG_LEVELS:
            raise ConfigError(
                f"TETHER_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {value!r}"
            )
        log_level = cast("LogLevel", value.lower())
    lsp = config.lsp
    if value := env.get("TETHER_LSP"):
        if value != "off":
            raise ConfigError(f"TETHER_LSP may only be off (no language servers), not {value!r}")
        names = dict.fromkeys([*(s.name for s in BUILTIN_SERVERS), *(s.name for s in lsp)])
        lsp = [*lsp, *(LspServerConfig(name=name, enabled=False) for name in names)]
    return msgspec.structs.replace(
        config, provider=provider, permissions=permissions, lsp=lsp, log_level=log_level
    )


KEY_VARIABLES: dict[ProviderKind, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""Each provider kind's own API key variable (see the module docstring for the order)."""


def _api_key(env: Mapping[str, str], file_provider: ProviderConfig, kind: ProviderKind) -> str:
    if key := env.get("TETHER_API_KEY"):
        return key
    if file_provider.api_key and file_provider.kind == kind:
        return file_provider.api_key
    return env.get(KEY_VARIABLES[kind], "")


class WorkspaceRules(msgspec.Struct, frozen=True, kw_only=True):
    """What a workspace's own `.tether/config.toml` may contribute: more caution only."""

    ask: list[str] = []
    deny: list[str] = []
    ignored: list[str] = []
    """Settings the file tried to set that a workspace may not (reported, never applied)."""


def load_workspace_rules(workspace: Path) -> WorkspaceRules:
    """Read `.tether/config.toml` in the workspace, keeping only ask and deny rules.

    A repository is not trusted with protected settings (provider, base URL, API key,
    permission mode, allow rules and shell): a cloned project must not be able to switch the
    agent to `auto` or point it at another model server.
    """
    path = workspace / ".tether" / "config.toml"
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return WorkspaceRules()
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return WorkspaceRules(ignored=[f"{path}: unreadable ({exc})"])
    ignored = [f"{key}" for key in raw if key != "permissions"]
    permissions = raw.get("permissions", {})
    ask: list[str] = []
    deny: list[str] = []
    if isinstance(permissions, dict):
        for key, value in permissions.items():  # type: ignore[union-attr]
            rules = [str(v) for v in value] if isinstance(value, list) else []  # type: ignore[union-attr]
            if key == "ask":
                ask = rules
            elif key == "deny":
                deny = rules
            else:
                ignored.append(f"permissions.{key}")
    return WorkspaceRules(ask=ask, deny=deny, ignored=ignored)
