"""MCP servers as users already write them: `command`/`args`/`env` (stdio) or `url`/`headers`
(streamable HTTP), by name.

Two places define them:
- the user's `config.toml`: `[mcpServers.NAME]` tables (trusted: the user wrote them);
- the workspace: `.mcp.json`, else `.tether/mcp.json`, `{"mcpServers": {NAME: {...}}}`. A
  workspace server runs a program the repository chose, so it runs only once the user has
  approved it (`tether.daemon.mcp.approvals`), and a workspace can never change a server the
  user defined: the user's definition of a name wins, and the workspace's is reported.

A name is letters, digits, `_` and `-` (it becomes part of tool names, `mcp__NAME__tool`).
"""

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from tether.daemon.mcp.named_files import named_files

NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
WORKSPACE_FILES = (".mcp.json", ".tether/mcp.json")
"""Where a workspace defines servers; the first that exists is read."""
CALL_TIMEOUT = 120.0
STARTUP_TIMEOUT = 30.0

Source = Literal["user", "workspace"]


class McpServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One server: a program to run (`command`, `args`, `env`, `cwd`) or an endpoint (`url`,
    `headers`)."""

    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    """Set for the server on top of the daemon's environment (without its secret-looking
    variables, as for commands): put the server's own tokens here."""
    cwd: str = ""
    """Where it runs (relative to the workspace); default: the workspace."""
    url: str = ""
    headers: dict[str, str] = {}
    type: str = ""
    """`stdio`, `http` or `streamable-http` (read from `command`/`url` when absent); other
    MCP clients' files carry it."""
    enabled: bool = True
    timeout: Annotated[float, msgspec.Meta(gt=0)] = CALL_TIMEOUT
    """Seconds a tool call may take before it is cancelled."""
    startup_timeout: Annotated[float, msgspec.Meta(gt=0)] = STARTUP_TIMEOUT
    """Seconds the server has to start and list its tools."""
    parallel_reads: bool = False
    """Let this server's tools that say they are read-only (`readOnlyHint`) run beside the
    turn's other reads. Off by default: the hint is the server's word, not tether's check."""

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs exactly one of `command` or `url`")
        if self.type not in ("", "stdio", "http", "streamable-http", "streamableHttp"):
            raise ValueError(
                f"MCP server type {self.type!r} is not supported (stdio or streamable HTTP)"
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server's url must be http:// or https://, not {self.url!r}")

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def fingerprint(self) -> str:
        """What an approval is given to: the whole definition, so any change asks again."""
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()


class ServerDefinition(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    source: Source
    config: McpServerConfig
    origin: str = ""
    """The file that defined it (for messages)."""
    files: dict[str, str] = {}
    """A workspace server's named files, as read now (`named_files`): path → sha256."""


class WorkspaceServers(msgspec.Struct, frozen=True, kw_only=True):
    servers: dict[str, McpServerConfig] = {}
    files: dict[str, dict[str, str]] = {}
    """The workspace files each server names, with their content's sha256 (`named_files`)."""
    path: str = ""
    problem: str = ""
    """Why the file (or one of its servers) was not used; "" when all is well."""


class _WorkspaceFile(msgspec.Struct, kw_only=True):
    mcpServers: dict[str, McpServerConfig] = {}


def read_workspace_servers(workspace: Path) -> WorkspaceServers:
    """The workspace's servers and the files they name (blocking: reads a small file, and
    hashes those). A file that cannot be read or is invalid defines none, and `problem` says
    why."""
    for relative in WORKSPACE_FILES:
        path = workspace / relative
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return WorkspaceServers(path=relative, problem=f"{relative}: cannot read it: {exc}")
        try:
            raw: object = json.loads(data)
            parsed = msgspec.convert(raw, _WorkspaceFile)
        except (ValueError, msgspec.ValidationError) as exc:
            return WorkspaceServers(path=relative, problem=f"{relative}: {exc}")
        bad = [name for name in parsed.mcpServers if not NAME.match(name)]
        if bad:
            return WorkspaceServers(path=relative, problem=f"{relative}: {bad_names(bad)}")
        files = {
            name: named_files(workspace, config.command, config.args, config.cwd, config.env)
            for name, config in parsed.mcpServers.items()
            if config.command
        }
        return WorkspaceServers(servers=parsed.mcpServers, files=files, path=relative)
    return WorkspaceServers()


def bad_names(names: list[str]) -> str:
    return (
        f"invalid MCP server name(s) {', '.join(repr(n) for n in names)}: use letters, digits, "
        "_ and - (at most 32)"
    )


def merge(
    user: dict[str, McpServerConfig], workspace: WorkspaceServers
) -> tuple[list[ServerDefinition], list[str]]:
    """Every enabled server by name, the user's first, and the problems to report (a workspace
    definition of a name the user defined is ignored)."""
    problems = [workspace.problem] if workspace.problem else []
    misnamed = [name for name in user if not NAME.match(name)]
    if misnamed:
        problems.append(f"config.toml: {bad_names(misnamed)}")
    found = [
        ServerDefinition(name=name, source="user", config=config, origin="config.toml")
        for name, config in user.items()
        if config.enabled and name not in misnamed
    ]
    shadowed = [name for name in workspace.servers if name in user]
    if shadowed:
        problems.append(
            f"{workspace.path} defines MCP server(s) {', '.join(shadowed)} that your own config "
            "defines; yours are used"
        )
    found += [
        ServerDefinition(
            name=name,
            source="workspace",
            config=config,
            origin=workspace.path,
            files=workspace.files.get(name, {}),
        )
        for name, config in workspace.servers.items()
        if name not in user and config.enabled
    ]
    return found, problems
