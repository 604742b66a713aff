"""The set of tools a turn may use: their schemas for the model, validation of the model's
calls, and running a validated call. It is the turn loop's `ToolRunner`; which tools exist is
the caller's choice (`tether.daemon.tools.builtin` lists the built-in ones).

Validation happens before anything runs; each problem becomes a result the model can act on:
an unknown tool lists the tools that exist, arguments that are not JSON are echoed (the first
300 characters), and missing or mistyped parameters are named.

Running never raises for a tool's failure, whatever its type: `ToolFailure` is the tool's own
explanation; any other exception (a bug, an unexpected OS error) becomes a failed result naming
the exception, so the model can go on and the turn survives. Cancellation is not a failure:
`trio.Cancelled` and anything else that is not an `Exception` (a `BaseExceptionGroup` holding
a Cancelled among them) propagates.

Every result, failures included, is capped at `ToolContext.result_cap` characters (20,000 by
default), keeping its head (40%) and tail (60%) around a marker; so is an edit's diff.
"""

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, cast

import msgspec

from tether.daemon.logs.log import get_logger
from tether.daemon.providers.base import ToolSet, ToolSpec
from tether.daemon.tools.base import (
    ConcurrentTool,
    EditTool,
    SchemaTool,
    Tool,
    ToolContext,
    ToolFailure,
    ToolParams,
    implements,
)
from tether.daemon.tools.images import ToolImage
from tether.daemon.truncate import cap_result
from tether.protocol.items import Subagent
from tether.protocol.methods import ToolInfo

Outcome = Literal["completed", "failed"]
log = get_logger(__name__)


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    status: Outcome
    output: str
    exit_code: int | None = None
    """A foreground command's exit status (see `ToolOutput`)."""
    diff: str = ""
    """The unified diff an edit made, capped like `output`."""
    subagent: Subagent | None = None
    """The subagent a `task` call ran (see `ToolOutput`)."""
    images: list[ToolImage] = []
    """Images for the model with `output` (see `ToolOutput`)."""
    edited: list[Path] = []
    """The files an edit changed besides its target (see `ToolOutput`)."""


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {tool.name: tool for tool in tools}
        self._decoders = {
            name: _decoder(tool.params)
            for name, tool in self._tools.items()
            if not implements(tool, SchemaTool)
        }
        self._schemas = {
            name: msgspec.json.encode(tool.input_schema())
            if implements(tool, SchemaTool)
            else _inline_schema(tool.params)
            for name, tool in self._tools.items()
        }
        # Built once: the tool list is part of the stable prompt prefix.
        self.toolset = ToolSet(
            specs=[
                ToolSpec(
                    name=name,
                    description=tool.description,
                    parameters=msgspec.Raw(self._schemas[name]),
                )
                for name, tool in self._tools.items()
            ]
        )

    def extended(self, tools: Iterable[Tool]) -> "ToolRegistry":
        """A registry of these tools followed by `tools` (the model sees them in that order)."""
        return ToolRegistry([*self._tools.values(), *tools])

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def is_read_only(self, name: str) -> bool:
        tool = self._tools.get(name)
        return tool is not None and tool.kind == "read"

    def runs_concurrently(self, name: str, params: ToolParams) -> bool:
        """Whether a validated call may run beside neighbouring concurrent calls: a read,
        or a call its tool says changes nothing itself (an explore subagent)."""
        tool = self._tools.get(name)
        if tool is None:
            return False
        return tool.kind == "read" or (implements(tool, ConcurrentTool) and tool.concurrent(params))

    def subset(self, names: Iterable[str]) -> "ToolRegistry":
        """A registry of the tools named that this one has, in this one's order."""
        wanted = set(names)
        return ToolRegistry(tool for name, tool in self._tools.items() if name in wanted)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def edited_path(self, name: str, params: ToolParams) -> Path | None:
        """The file a validated call of an edit tool changes, as the model named it; None for
        any other tool."""
        tool = self._tools.get(name)
        return Path(tool.target_path(params)) if implements(tool, EditTool) else None

    def infos(self) -> list[ToolInfo]:
        return [
            ToolInfo(
                name=name,
                description=tool.description,
                read_only=tool.kind == "read",
                input_schema=msgspec.Raw(self._schemas[name]),
            )
            for name, tool in self._tools.items()
        ]

    def validate(self, name: str, arguments: str) -> ToolParams | str:
        """The decoded params, or an error message for the model."""
        tool = self._tools.get(name)
        if implements(tool, SchemaTool):
            return tool.decode(arguments)
        decoder = self._decoders.get(name)
        if decoder is None:
            return f"Unknown tool {name!r}. Available tools: {', '.join(self._tools)}."
        try:
            return decoder.decode(arguments.strip() or "{}")
        except msgspec.ValidationError as exc:
            return f"Invalid arguments for {name}: {exc}. Fix the arguments and call it again."
        except msgspec.DecodeError:
            return (
                f"The arguments for {name} are not valid JSON: {arguments[:300]!r}. "
                "Send a JSON object matching the tool's schema."
            )

    async def run(self, name: str, params: ToolParams, ctx: ToolContext) -> ToolResult:
        """Run a validated call. Every failure is a `failed` result (see the module rules);
        cancellation propagates."""
        try:
            output = await self._tools[name].run(params, ctx)
        except Exception as exc:
            if not all(isinstance(leaf, ToolFailure | OSError) for leaf in _leaves(exc)):
                log.exception("a tool raised", tool=name)
            return ToolResult(
                status="failed", output=cap_result(failure(name, exc), ctx.result_cap)
            )
        if isinstance(output, str):
            return ToolResult(status="completed", output=cap_result(output, ctx.result_cap))
        return ToolResult(
            status="completed",
            output=cap_result(output.text, ctx.result_cap),
            exit_code=output.exit_code,
            diff=cap_result(output.diff, ctx.result_cap),
            subagent=output.subagent,
            images=output.images,
            edited=output.edited,
        )


def failure(name: str, exc: Exception) -> str:
    """What the model is told when tool `name` raised `exc`: a ToolFailure's own message; for
    an OS error, what failed; for anything else, that tether hit an unexpected error. A group
    (from a tool's nursery) is told by its leaves."""
    leaves = _leaves(exc)
    if all(isinstance(leaf, ToolFailure) for leaf in leaves):
        return "\n".join(str(leaf) for leaf in leaves)
    if all(isinstance(leaf, OSError) for leaf in leaves):
        return "\n".join(f"{name} failed: {leaf}" for leaf in leaves)
    shown = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
    return (
        f"{name} failed with an unexpected error ({shown}). This is a problem in tether, not "
        "in your call; try another way to reach the goal."
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        return [leaf for inner in group.exceptions for leaf in _leaves(inner)]
    return [exc]


# A turn that adds skills or MCP tools builds a registry of its own: the built-in tools'
# schemas and decoders are made once per process, not at every turn.
@functools.cache
def _decoder(params: type[ToolParams]) -> "msgspec.json.Decoder[ToolParams]":
    return msgspec.json.Decoder(params)


@functools.cache
def _inline_schema(params: type[ToolParams]) -> bytes:
    """The params' JSON Schema with every $ref resolved in place, as providers expect
    (encoded)."""
    schema = msgspec.json.schema(params)
    defs = schema.pop("$defs", {})
    inlined = _resolve_refs(schema, defs)
    assert isinstance(inlined, dict)
    result = cast("dict[str, object]", inlined)
    result.pop("title", None)
    result.setdefault("properties", {})
    return msgspec.json.encode(result)


def _resolve_refs(node: object, defs: dict[str, object]) -> object:
    if isinstance(node, dict):
        mapping = cast("dict[str, object]", node)
        ref = mapping.get("$ref")
        if isinstance(ref, str):
            return _resolve_refs(defs[ref.rsplit("/", 1)[-1]], defs)
        return {key: _resolve_refs(value, defs) for key, value in mapping.items()}
    if isinstance(node, list):
        return [_resolve_refs(value, defs) for value in cast("list[object]", node)]
    return node
