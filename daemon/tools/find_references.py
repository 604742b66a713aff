"""find_references: every use of a symbol, asked of the file's language server, grouped by
file and bounded."""

from collections import Counter
from typing import Annotated, ClassVar

import msgspec

from tether.daemon.lsp.navigation import references
from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.code_intel import (
    SymbolAtParams,
    leased,
    line_of,
    source_lines,
    still_indexing,
)
from tether.daemon.workspace import display_path

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_FILES_NAMED = 20


class FindReferencesParams(SymbolAtParams, frozen=True, kw_only=True):
    limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_LIMIT,
            description=f"Uses shown with their line (default {DEFAULT_LIMIT}); the rest are "
            "counted per file.",
        ),
    ] = DEFAULT_LIMIT


class FindReferences:
    name: ClassVar[str] = "find_references"
    description: ClassVar[str] = (
        "Find every use of a symbol across the workspace, using the file's language server "
        "(it follows imports, so a same-named symbol elsewhere is not counted, unlike grep). "
        "Give the file, the line where the symbol appears and its name. Answers with the count, "
        f"then the first `limit` uses (default {DEFAULT_LIMIT}) grouped by file as "
        "`line: source line`; the rest are counted per file. The definition itself is not "
        "listed. Says so when no language server covers the file or the server is still "
        "indexing."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = FindReferencesParams

    async def run(self, params: FindReferencesParams, ctx: ToolContext) -> str:
        async with leased(ctx, params.path, "referencesProvider") as lease:
            position = params.position_in(lease)
            found = await references(lease, position)
            if not found and lease.just_started:
                raise still_indexing(lease)
            shown = found[: params.limit]
            lines = await source_lines(ctx, shown, lease)
        name = params.shown_name
        if not found:
            return f"No uses of {name} were found by {lease.server}."
        files = Counter(display_path(ctx.workspace, loc.path) for loc in found)
        out = [f"{_count(len(found), 'use')} of {name} in {_count(len(files), 'file')}:"]
        current = ""
        for location in shown:
            file = display_path(ctx.workspace, location.path)
            if file != current:
                current = file
                out.append(file)
            text = line_of(lines, location)
            out.append(f"  {location.line}: {text}" if text else f"  {location.line}")
        rest = Counter(display_path(ctx.workspace, loc.path) for loc in found[params.limit :])
        if rest:
            named = ", ".join(f"{file} ({n})" for file, n in rest.most_common(MAX_FILES_NAMED))
            more = len(rest) - MAX_FILES_NAMED
            tail = f", and {more} more files" if more > 0 else ""
            out.append(
                f"… {len(found) - len(shown)} more uses not shown: {named}{tail} "
                "(raise limit to see them)."
            )
        return "\n".join(out)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
