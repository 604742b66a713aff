"""MCP servers' tools as tools of the turn: `mcp__SERVER__TOOL`, with the server's JSON Schema.

A call's arguments are checked against the schema (`tether.daemon.mcp.schema`) before the
server is called; a bad one is a result naming each problem, and the server never sees it.
The call goes to the pool (`tether.daemon.mcp.pool`): its failures (not running, timed out,
crashed mid-call, an error answer) and a result the server marks `isError` are failed
results; the content becomes text (`tether.daemon.mcp.content`), capped like any tool's. Its
images (at most four) go to the context's `ImageKeeper` (`tether.daemon.tools.images`), which
checks and downscales them as a message's images; each one it keeps goes with the result, and
its line in the text names it (`[image look-1.png 640x480, 12 KB: returned by the tool]`); one
it refuses, or every one when there is no keeper or the result is an error, is a line saying
why it was not shown.

Every such call asks the user outside `auto` (`ExternalTool`), unless a rule allows it
(`mcp__github__*` allows a whole server). A tool the server says is read-only
(`readOnlyHint`) runs beside the turn's reads only when the server's config says
`parallel_reads = true`; otherwise each call runs alone, in order.

Names: the model's tool names allow letters, digits, `_` and `-` (64 at most), so any other
character of a server's tool name becomes `_`, and a name that collides after that is
left out (logged).
"""

import re
from collections.abc import Awaitable, Callable
from typing import ClassVar, cast

import msgspec

from tether.daemon.logs.log import get_logger
from tether.daemon.mcp.client import McpTool
from tether.daemon.mcp.config import McpServerConfig, ServerDefinition
from tether.daemon.mcp.content import join_lines, not_shown, result_parts
from tether.daemon.mcp.errors import McpError
from tether.daemon.mcp.schema import problems
from tether.daemon.tools.base import (
    Tool,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolOutput,
    ToolParams,
)
from tether.daemon.tools.images import ToolImage, image_keeper
from tether.protocol.events import ToolProgress
from tether.protocol.images import describe_size
from tether.protocol.items import ImageRef

log = get_logger(__name__)

PREFIX = "mcp__"
MAX_NAME = 64
MAX_DESCRIPTION = 4_000
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

CallMcp = Callable[
    [str, str, dict[str, object], Callable[[ToolProgress], None]], Awaitable[dict[str, object]]
]
"""Calls (server, tool, arguments, where its progress reports go) and returns the raw
`tools/call` result."""


class McpArguments(ToolParams, frozen=True, kw_only=True):
    arguments: dict[str, object] = {}


def tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{_UNSAFE.sub('_', tool)}"[:MAX_NAME]


class McpServerTool:
    """One tool of one server. A class per tool (see `mcp_tools`), since a tool's name and
    description are class attributes."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    kind: ClassVar[ToolKind] = "other"
    params: ClassVar[type[ToolParams]] = McpArguments

    def __init__(self, server: str, config: McpServerConfig, tool: McpTool, call: CallMcp) -> None:
        self.server = server
        self.config = config
        self.tool = tool
        self._call = call
        schema = dict(tool.inputSchema)
        schema["type"] = "object"
        schema.setdefault("properties", {})
        self._schema = schema
        hints = tool.annotations
        self.read_only = hints is not None and hints.readOnlyHint

    def input_schema(self) -> dict[str, object]:
        return self._schema

    def decode(self, arguments: str) -> ToolParams | str:
        try:
            value: object = msgspec.json.decode(arguments.strip() or "{}")
        except msgspec.DecodeError:
            return (
                f"The arguments for {self.name} are not valid JSON: {arguments[:300]!r}. "
                "Send a JSON object matching the tool's schema."
            )
        if not isinstance(value, dict):
            return f"The arguments for {self.name} must be a JSON object."
        arguments_given = cast("dict[str, object]", value)
        found = problems(self._schema, arguments_given)
        if found:
            return (
                f"Invalid arguments for {self.name}: {'; '.join(found)}. The server was not "
                "called; fix the arguments and call it again."
            )
        return McpArguments(arguments=arguments_given)

    def external_target(self) -> str:
        return f"MCP server {self.server}"

    def concurrent(self, params: McpArguments) -> bool:
        return self.read_only and self.config.parallel_reads

    async def run(self, params: McpArguments, ctx: ToolContext) -> ToolOutput:
        try:
            result = await self._call(self.server, self.tool.name, params.arguments, ctx.progress)
        except McpError as exc:
            raise ToolFailure(str(exc)) from exc
        # The images are named after the tool, in the characters a tool name may have.
        parts, is_error = result_parts(result, _UNSAFE.sub("_", self.tool.name))
        keeper = image_keeper(ctx.services)
        lines: list[str] = []
        images: list[ToolImage] = []
        for part in parts:
            if isinstance(part, str):
                lines.append(part)
                continue
            kept: ToolImage | str = "tether sends no images here"
            if is_error:
                kept = "the call failed"
            elif keeper is not None:
                kept = await keeper.keep(part.name, part.data)
            if isinstance(kept, str):
                lines.append(not_shown(part, kept))
            else:
                images.append(kept)
                lines.append(image_line(kept.ref))
        text = join_lines(lines)
        if is_error:
            raise ToolFailure(text)
        return ToolOutput(text=text, images=images)


def image_line(ref: ImageRef) -> str:
    """The line of the result's text that names an image sent with it."""
    line = f"[image {ref.name} {ref.width}x{ref.height}, {describe_size(ref.size)}"
    if ref.original_width:
        line += f", downscaled from {ref.original_width}x{ref.original_height}"
    return line + ": returned by the tool]"


def mcp_tools(offered: list[tuple[ServerDefinition, McpTool]], call: CallMcp) -> list[Tool]:
    """A tool for each offered (server, tool), in order; names that collide are left out."""
    tools: list[Tool] = []
    seen: set[str] = set()
    for definition, tool in offered:
        name = tool_name(definition.name, tool.name)
        if name in seen:
            log.warning("an MCP tool collides with another; left out", tool=tool.name, server=name)
            continue
        seen.add(name)
        description = (
            tool.description or tool.title or f"{tool.name} (MCP server {definition.name})"
        )
        bound = type(
            "McpServerTool",
            (McpServerTool,),
            {"name": name, "description": description[:MAX_DESCRIPTION]},
        )
        tools.append(bound(definition.name, definition.config, tool, call))
    return tools
