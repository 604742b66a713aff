"""find_definition: where a symbol is defined, asked of the file's language server."""

from typing import ClassVar

from tether.daemon.lsp.navigation import definitions
from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.code_intel import (
    SymbolAtParams,
    leased,
    located_line,
    source_lines,
    still_indexing,
)

MAX_SHOWN = 20


class FindDefinition:
    name: ClassVar[str] = "find_definition"
    description: ClassVar[str] = (
        "Find where a symbol is defined, using the file's language server (it resolves "
        "imports, so it finds the right one of several same-named definitions, unlike grep). "
        "Give the file, the line where the symbol appears and its name. Answers with "
        "`path:line: source line` for each definition (and for its type's definition when the "
        f"server gives one that differs), at most {MAX_SHOWN}. Says so when no language server "
        "covers the file or the server is still indexing."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SymbolAtParams

    async def run(self, params: SymbolAtParams, ctx: ToolContext) -> str:
        async with leased(ctx, params.path, "definitionProvider") as lease:
            position = params.position_in(lease)
            found = await definitions(lease, position)
            types = []
            if lease.client.capabilities.typeDefinitionProvider not in (None, False):
                types = [
                    t
                    for t in await definitions(lease, position, kind="typeDefinition")
                    if t not in found
                ]
            if not found and not types and lease.just_started:
                raise still_indexing(lease)
            lines = await source_lines(ctx, [*found, *types], lease)
        name = params.shown_name
        if not found and not types:
            return (
                f"No definition of {name} was found by {lease.server} (a builtin, or not "
                "resolvable)."
            )
        out = [f"{name} is defined at:"] if found else []
        out += [f"  {located_line(ctx, lines, loc)}" for loc in found[:MAX_SHOWN]]
        if len(found) > MAX_SHOWN:
            out.append(f"  … and {len(found) - MAX_SHOWN} more")
        if types:
            out.append("Its type is defined at:")
            out += [f"  {located_line(ctx, lines, loc)}" for loc in types[:MAX_SHOWN]]
        return "\n".join(out)
