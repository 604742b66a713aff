"""The MCP servers an editor passes in `session/new` and `session/load`, as the servers a
tether session is given (`session/configure`'s `mcpServers`).

Stdio servers (ACP says every agent supports them) and streamable-HTTP ones (`type: "http"`)
are passed on; an `sse` (deprecated in MCP) or `acp` server, which tether does not advertise,
is left out with a line on stderr. ACP names are for people ("GitHub tools"); tether's become
part of tool names, so each name keeps its letters, digits, `_` and `-` (others become `_`),
at most 32 of them, with `-2`, `-3`, … when two come out the same.
"""

import re
from typing import Any

import msgspec

from tether.clients.acp.peer import INVALID_PARAMS, AcpError
from tether.protocol.methods import SessionMcpServer

MAX_NAME = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class _Pair(msgspec.Struct, frozen=True):
    name: str
    value: str


class _Server(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    type: str = "stdio"
    command: str = ""
    args: list[str] = []
    env: list[_Pair] = []
    url: str = ""
    headers: list[_Pair] = []


def session_servers(servers: list[Any]) -> tuple[list[SessionMcpServer], list[str]]:
    """The servers tether runs for the session, and what was left out (for the log)."""
    given: list[SessionMcpServer] = []
    left_out: list[str] = []
    names: set[str] = set()
    for index, raw in enumerate(servers):
        try:
            server = msgspec.convert(raw, _Server)
        except msgspec.ValidationError as exc:
            raise AcpError(INVALID_PARAMS, f"mcpServers[{index}]: {exc}") from exc
        if server.type not in ("stdio", "http"):
            left_out.append(f"{server.name} ({server.type}: tether speaks stdio and http)")
            continue
        name = _unique(_UNSAFE.sub("_", server.name)[:MAX_NAME] or "server", names)
        names.add(name)
        given.append(
            SessionMcpServer(
                name=name,
                command=server.command if server.type == "stdio" else "",
                args=server.args if server.type == "stdio" else [],
                env={pair.name: pair.value for pair in server.env},
                url=server.url if server.type == "http" else "",
                headers={pair.name: pair.value for pair in server.headers},
            )
        )
    return given, left_out


def _unique(name: str, taken: set[str]) -> str:
    number = 2
    found = name
    while found in taken:
        suffix = f"-{number}"
        found = name[: MAX_NAME - len(suffix)] + suffix
        number += 1
    return found
