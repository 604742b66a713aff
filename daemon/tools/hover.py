"""hover: a symbol's type signature and documentation, asked of the file's language server."""

from typing import ClassVar

from tether.daemon.lsp.navigation import hover
from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.code_intel import SymbolAtParams, leased, still_indexing

MAX_CHARS = 4000


class Hover:
    name: ClassVar[str] = "hover"
    description: ClassVar[str] = (
        "Show a symbol's type signature and documentation, as the file's language server "
        "infers them (the inferred type of a variable, a function's signature with its "
        "defaults, a class's docstring). Give the file, the line where the symbol appears and "
        f"its name. At most {MAX_CHARS} characters. Says so when no language server covers "
        "the file or the server is still indexing."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SymbolAtParams

    async def run(self, params: SymbolAtParams, ctx: ToolContext) -> str:
        async with leased(ctx, params.path, "hoverProvider") as lease:
            position = params.position_in(lease)
            text = await hover(lease, position)
            if not text and lease.just_started:
                raise still_indexing(lease)
        name = params.shown_name
        if not text:
            return f"{lease.server} has nothing to show for {name} at {params.path}:{params.line}."
        if len(text) > MAX_CHARS:
            text = text[:MAX_CHARS] + f"\n… [cut at {MAX_CHARS} characters]"
        return text
